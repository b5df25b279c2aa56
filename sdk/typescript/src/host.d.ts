/**
 * The modules componentize-js provides inside the component: the `host` and
 * `egress` interfaces of `operon:reconciler@0.2.0` (see `wit.ts` for the
 * shapes). They exist only there, which is why only `component.ts` imports
 * them.
 */
declare module "operon:reconciler/host@0.2.0" {
  type Gvk = { group: string; version: string; kind: string };

  /** Throws nothing. */
  export function log(
    level: "trace" | "debug" | "info" | "warn" | "error",
    message: string,
    fields: [string, string][],
  ): void;
  /** Throws the host's error (the kind may not be read) on `err`. */
  export function get(ref: { kind: Gvk; namespace?: string; name: string }): string | undefined;
  /** Throws the host's error on `err`. */
  export function list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): string[];
}

declare module "operon:reconciler/egress@0.2.0" {
  /**
   * Throws, on `err`, an error whose `payload` is the `http-error` variant:
   * `{ tag: "denied" | "invalid" | "timeout" | "unreachable" | "too-large" |
   * "budget" | "not-recorded", val: message }`.
   */
  export function fetch(request: {
    method: string;
    url: string;
    headers: [string, string][];
    body?: Uint8Array;
    credential?: string;
    timeoutMs?: number;
  }): { status: number; headers: [string, string][]; body: Uint8Array };
}
