/**
 * The module componentize-js provides inside the component: the `host`
 * interface of `operon:reconciler@0.2.0` (see `wit.ts` for the shapes). It
 * exists only there, which is why only `component.ts` imports it.
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
