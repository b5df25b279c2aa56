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
  | { allInNamespace: true }
  /**
   * The parent's field at this dotted path (`spec.configRef`) names the
   * watched object (`name` in the parent's namespace, or `namespace/name`):
   * exactly the parents naming it are reconciled, and it is in `request.related`.
   */
  | { reference: string }
  /**
   * The parent's field at this dotted path (`spec.selector`) is a label
   * selector (`matchLabels`/`matchExpressions`, or a plain label map) over the
   * watched kind in the parent's namespace: the matching objects are in
   * `request.related`. A missing or empty selector selects nothing.
   */
  | { selector: string };

/** A kind the reconciler does not own whose changes reconcile a parent. */
export interface Watch {
  kind: Gvk;
  mapping: Mapping;
}

/**
 * How the host changes an existing child of one owned kind whose desired form changed:
 * - `in-place` (the default): server-side apply over it;
 * - `recreate`: server-side apply, and when the API server refuses it because a
 *   field is immutable (a Job's template, a Pod's spec), delete the child and
 *   create it anew on the next reconcile;
 * - `on-delete`: leave it; only missing children are created.
 */
export type UpdateStrategy = "in-place" | "recreate" | "on-delete";

/** The update strategy of one owned kind. */
export interface OwnedUpdate {
  kind: Gvk;
  strategy: UpdateStrategy;
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
  /** Update strategies of owned kinds (`[{ kind: kinds.Job, strategy: "recreate" }]`); others are `in-place`. */
  updates?: OwnedUpdate[];
  /**
   * When set, the host keeps it on every parent whose outcome says
   * `outcome.needsFinalizer` (the default when a finalizer is declared,
   * except in the answer to a finalizing request), and calls `reconcile` with
   * `request.finalizing` when such a parent is deleted or leaves the
   * Reconciler's selector, until the outcome is finished.
   */
  finalizer?: string;
}
