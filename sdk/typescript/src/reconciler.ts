/**
 * The {@link Reconciler} interface.
 * @module
 */

import type { Review } from "./admission.js";
import type { Context } from "./context.js";
import type { Manifest } from "./manifest.js";
import type { Outcome } from "./outcome.js";
import type { KubeObject, Request } from "./request.js";
import type { Schema } from "./schema.js";

/**
 * A reconciler: the kind it reconciles and how. Make it the default export of
 * the module `package.json` names (`"operon": { "reconciler": "src/index.ts" }`,
 * the default); `operon build` makes it the component's exports.
 *
 * The host may give every call a fresh instance and calls `reconcile` any
 * number of times for the same object (reconciliation is level-based): keep
 * no state between calls, derive the answer from the request alone.
 *
 * Admission is optional: define `validate` and/or `mutate` and set `world =
 * "reconciler-with-admission"` in `operon.toml`. A reconciler without them
 * builds the plain `reconciler` world.
 *
 * Conversion is optional too: define `convert` and set `world =
 * "reconciler-with-conversion"` (`"reconciler-with-admission-and-conversion"`
 * with admission).
 */
export interface Reconciler<T = KubeObject> {
  /**
   * Reads the parent (default: as it is). A parent that does not fit is a
   * terminal failure naming the object and the field (``WebApp shop/web is
   * invalid: missing field `image` ``), raised before `reconcile` runs, also
   * while finalizing: keep the schema as lenient as the CRD's.
   */
  readonly parent?: Schema<T>;

  /** Describe the reconciler. Must be pure and cheap: the host calls it when it loads the module. */
  manifest(): Manifest;

  /**
   * Compute the desired state of one parent.
   * @throws {Transient} to be retried with backoff.
   * @throws {Terminal} to wait until the object changes.
   */
  reconcile(request: Request<T>, ctx: Context): Outcome;

  /** Accept (with warnings, possibly none) or refuse ({@link Denied}) a request. */
  validate?(review: Review, ctx: Context): string[];

  /** The whole object as it should be stored, or undefined to leave it; or refuse ({@link Denied}). */
  mutate?(review: Review, ctx: Context): KubeObject | undefined;

  /**
   * Convert every object to `desiredApiVersion` (`group/version`), in order,
   * keeping each one's `kind`, name, namespace and uid; an object already at
   * that version is returned as it is. Pure: no reads, no state. Throw
   * {@link ConversionError} to refuse the request.
   */
  convert?(objects: KubeObject[], desiredApiVersion: string): KubeObject[];
}

/** Whether the reconciler defines `convert`. */
export function hasConversion(reconciler: Reconciler<unknown>): boolean {
  return typeof reconciler.convert === "function";
}

/** Whether the reconciler defines `validate` or `mutate`. */
export function hasAdmission(reconciler: Reconciler<unknown>): boolean {
  return typeof reconciler.validate === "function" || typeof reconciler.mutate === "function";
}
