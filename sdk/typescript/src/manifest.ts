/**
 * What a reconciler reconciles, owns, watches and reads: {@link Manifest}.
 * @module
 */

import type { Gvk } from "./kinds.js";

/** How a change of a watched object finds the parent to reconcile. */
export type Mapping =
  /** The watched object's label `name` holds the parent's name (same namespace). */
  | { label: string }
  /** The watched object's annotation `name` holds `namespace/name` (or `name`) of the parent. */
  | { annotation: string }
  /** Every parent in the watched object's namespace is reconciled (a fan-out). */
  | { allInNamespace: true };

/** A kind the reconciler does not own whose changes reconcile a parent. */
export interface Watch {
  kind: Gvk;
  mapping: Mapping;
}

/**
 * Describes a reconciler to the host, which reads it once when it loads the
 * module.
 *
 * ```ts
 * const manifest: Manifest = {
 *   name: "webapp",
 *   for: gvk("example.operon.dev", "v1alpha1", "WebApp"),
 *   owns: [kinds.Deployment, kinds.Service],
 *   finalizer: "example.operon.dev/cleanup",
 * };
 * ```
 */
export interface Manifest {
  /** Controller name, lowercase `[a-z0-9-]`: the field manager is `operon/<name>`; metrics and events use it. */
  name: string;
  /** The parent kind. */
  for: Gvk;
  /**
   * Kinds of children. Returning any other kind is refused and nothing is
   * written; existing children reach `request.children` in this order.
   */
  owns?: Gvk[];
  /** Other kinds whose changes reconcile a parent; the mapped objects arrive in `request.related`. */
  watches?: Watch[];
  /** Kinds the reconciler reads with `ctx.get` and `ctx.list`. */
  reads?: Gvk[];
  /**
   * When set, the host adds it to every parent and calls `reconcile` with
   * `request.finalizing` when the parent is deleted, until the outcome is
   * finished.
   */
  finalizer?: string;
}
