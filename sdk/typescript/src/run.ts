/**
 * The one code path from a WIT record to a WIT record, shared by the component
 * adapter (`component.ts`) and native callers (`testing.ts`): what passes
 * natively through these functions runs the same in the component.
 * @module
 */

import type { Review } from "./admission.js";
import { Context, type Host } from "./context.js";
import { ConversionError } from "./conversion.js";
import { HttpError } from "./egress.js";
import { Terminal, Transient } from "./failure.js";
import type { Gvk } from "./kinds.js";
import type { Manifest } from "./manifest.js";
import { Outcome, type RawOutcome } from "./outcome.js";
import type { Reconciler } from "./reconciler.js";
import { type KubeObject, type Readiness, Request, parseObject } from "./request.js";
import type { WitReview } from "./wit.js";

/** The WIT `request` record: objects as JSON text, children grouped by kind with their readiness. */
export interface RawRequest {
  object: string;
  children: [Gvk, { object: string; readiness: Readiness }[]][];
  related: string[];
  finalizing: boolean;
  attempt: number;
  now: string;
}

/** The `manifest` export. */
export function manifest(reconciler: Reconciler<unknown>): Manifest {
  const m = reconciler.manifest();
  if (typeof m !== "object" || m === null || typeof m.name !== "string" || typeof m.for !== "object") {
    throw new TypeError(`manifest() must return a Manifest ({ name, for, ... }), not ${JSON.stringify(m)}`);
  }
  return m;
}

/**
 * The `reconcile` export: read the parent with the reconciler's schema, call
 * `reconcile` with a {@link Context} over `host`, serialize the outcome.
 *
 * `needsFinalizer` defaults as 0.1's finalizer behaved, so reconcilers
 * written for it keep their finalizer: true when the manifest declares one,
 * except in the answer to a finalizing request.
 * @throws {Transient} {Terminal} the reconciler's failure; terminal also when
 *   the parent does not fit its schema; transient when an {@link HttpError}
 *   escapes `reconcile`.
 */
export function reconcile<T>(
  reconciler: Reconciler<T>,
  host: Host,
  raw: RawRequest,
): RawOutcome & { needsFinalizer: boolean } {
  let parent: unknown;
  try {
    parent = JSON.parse(raw.object);
  } catch (error) {
    throw new Terminal(`the parent is not a Kubernetes object: ${(error as Error).message}`);
  }
  if (typeof parent !== "object" || parent === null || Array.isArray(parent)) {
    throw new Terminal("the parent is not a Kubernetes object: not a JSON object");
  }
  const object = parent as KubeObject;
  const request = new Request<T>(
    parseObject(object, reconciler.parent),
    object,
    raw.children.map(([kind, children]) => [
      kind,
      children.map((c) => ({ object: JSON.parse(c.object) as KubeObject, readiness: { ...c.readiness } })),
    ]),
    raw.related.map((o) => JSON.parse(o) as KubeObject),
    raw.finalizing,
    raw.attempt,
    raw.now,
  );
  let outcome: unknown;
  try {
    outcome = reconciler.reconcile(request, new Context(host));
  } catch (error) {
    if (error instanceof HttpError) {
      throw new Transient(error.call ? `${error.call}: ${error}` : String(error));
    }
    throw error;
  }
  if (!(outcome instanceof Outcome)) {
    throw new Terminal("reconcile() must return an Outcome");
  }
  const out = outcome.toRaw();
  const declared = manifest(reconciler as Reconciler<unknown>).finalizer !== undefined;
  const needsFinalizer = out.needsFinalizer ?? (declared && !raw.finalizing);
  return { ...out, needsFinalizer };
}

function review(raw: WitReview): Review {
  const load = (text: string | undefined) => (text === undefined ? undefined : (JSON.parse(text) as KubeObject));
  return { ...raw, object: load(raw.object), oldObject: load(raw.oldObject) };
}

/** The `validate` export: the warnings, or a thrown `Denied`. Without `validate`, everything is allowed. */
export function validate(reconciler: Reconciler<unknown>, host: Host, raw: WitReview): string[] {
  if (!reconciler.validate) return [];
  return (reconciler.validate(review(raw), new Context(host, false)) ?? []).map(String);
}

/** The `mutate` export: the whole object as JSON text, undefined to leave it, or a thrown `Denied`. */
export function mutate(reconciler: Reconciler<unknown>, host: Host, raw: WitReview): string | undefined {
  if (!reconciler.mutate) return undefined;
  const result = reconciler.mutate(review(raw), new Context(host, false));
  if (result === undefined || result === null) return undefined;
  if (typeof result !== "object" || Array.isArray(result)) {
    throw new TypeError(`mutate() must return an object or undefined, not ${JSON.stringify(result)}`);
  }
  return JSON.stringify(result);
}

/**
 * The `convert` export: the objects as JSON text at `desiredApiVersion`, or a
 * thrown {@link ConversionError}. Without `convert`, every request is refused.
 */
export function convert(reconciler: Reconciler<unknown>, objects: string[], desiredApiVersion: string): string[] {
  if (!reconciler.convert) throw new ConversionError("this reconciler converts nothing (it has no convert)");
  const result = reconciler.convert(
    objects.map((o) => JSON.parse(o) as KubeObject),
    desiredApiVersion,
  );
  if (!Array.isArray(result) || result.some((o) => typeof o !== "object" || o === null || Array.isArray(o))) {
    throw new TypeError(`convert() must return a list of objects, not ${JSON.stringify(result)}`);
  }
  return result.map((o) => JSON.stringify(o));
}
