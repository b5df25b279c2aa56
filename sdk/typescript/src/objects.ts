/**
 * Building objects: {@link newObject} and status {@link Condition}s.
 * @module
 */

import { type Gvk, apiVersion } from "./kinds.js";
import type { KubeObject } from "./request.js";

/** Metadata for {@link newObject}. */
export interface ObjectMeta {
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/**
 * A Kubernetes object: `apiVersion`, `kind`, `metadata` and the top-level
 * fields of `body` (`{ spec }`, `{ data }`). The namespace is usually left
 * out: the host puts children in the parent's.
 *
 * ```ts
 * newObject(kinds.ConfigMap, "hello-greeting", {}, { data: { message: "hi" } })
 * // { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hello-greeting" }, data: { message: "hi" } }
 * ```
 */
export function newObject(kind: Gvk, name: string, meta: ObjectMeta = {}, body: KubeObject = {}): KubeObject {
  const metadata: KubeObject = { name };
  if (meta.namespace !== undefined) metadata.namespace = meta.namespace;
  if (meta.labels && Object.keys(meta.labels).length) metadata.labels = { ...meta.labels };
  if (meta.annotations && Object.keys(meta.annotations).length) metadata.annotations = { ...meta.annotations };
  return { apiVersion: apiVersion(kind), kind: kind.kind, metadata, ...body };
}

/** A `metav1.Condition`. Timestamps stay text (RFC 3339), so they round-trip exactly. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown" | string;
  observedGeneration?: number;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

/** The condition of `type`, or undefined. */
export function findCondition<C extends { type: string }>(conditions: readonly C[] | undefined, type: string): C | undefined {
  return conditions?.find((c) => c.type === type);
}

/**
 * `lastTransitionTime` of a condition now `status`: the previous one's while
 * its status holds, else `changedAt`.
 *
 * Never read the clock for `changedAt` (the outcome must be a function of the
 * request, or every reconcile rewrites the status): use `request.now`.
 */
export function transitionTime(
  previous: { status: string; lastTransitionTime: string } | undefined,
  status: string,
  changedAt: string,
): string {
  return previous !== undefined && previous.status === status ? previous.lastTransitionTime : changedAt;
}
