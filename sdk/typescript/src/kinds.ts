/**
 * Kubernetes kinds: {@link Gvk} and the kinds reconcilers commonly own.
 * @module
 */

/** A Kubernetes kind: API group (empty for the core group), version and kind. */
export interface Gvk {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
}

/** A kind from its group, version and kind. */
export function gvk(group: string, version: string, kind: string): Gvk {
  return { group, version, kind };
}

/** The kind of an object with this `apiVersion` (`apps/v1`, or `v1`) and `kind`. */
export function fromApiVersion(apiVersion: string, kind: string): Gvk {
  const slash = apiVersion.lastIndexOf("/");
  return slash < 0 ? gvk("", apiVersion, kind) : gvk(apiVersion.slice(0, slash), apiVersion.slice(slash + 1), kind);
}

/** `group/version`, or just `version` for the core group. */
export function apiVersion(kind: Gvk): string {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

/** `apps/v1 Deployment`, `v1 Service`. */
export function kindToString(kind: Gvk): string {
  return `${apiVersion(kind)} ${kind.kind}`;
}

/** Whether two kinds are the same. */
export function sameKind(a: Gvk, b: Gvk): boolean {
  return a.group === b.group && a.version === b.version && a.kind === b.kind;
}

/** The kind of a JSON object, or undefined when it lacks `apiVersion` or `kind`. */
export function kindOf(object: unknown): Gvk | undefined {
  if (typeof object !== "object" || object === null) return undefined;
  const { apiVersion: version, kind } = object as { apiVersion?: unknown; kind?: unknown };
  return typeof version === "string" && typeof kind === "string" ? fromApiVersion(version, kind) : undefined;
}

/** Whether the JSON object is of `kind`. */
export function isKind(object: unknown, kind: Gvk): boolean {
  const found = kindOf(object);
  return found !== undefined && sameKind(found, kind);
}

/** Kinds reconcilers commonly own or read. */
export const kinds = {
  ConfigMap: gvk("", "v1", "ConfigMap"),
  Secret: gvk("", "v1", "Secret"),
  Service: gvk("", "v1", "Service"),
  ServiceAccount: gvk("", "v1", "ServiceAccount"),
  PersistentVolumeClaim: gvk("", "v1", "PersistentVolumeClaim"),
  Deployment: gvk("apps", "v1", "Deployment"),
  StatefulSet: gvk("apps", "v1", "StatefulSet"),
  DaemonSet: gvk("apps", "v1", "DaemonSet"),
  Job: gvk("batch", "v1", "Job"),
  CronJob: gvk("batch", "v1", "CronJob"),
  Ingress: gvk("networking.k8s.io", "v1", "Ingress"),
  NetworkPolicy: gvk("networking.k8s.io", "v1", "NetworkPolicy"),
  Role: gvk("rbac.authorization.k8s.io", "v1", "Role"),
  RoleBinding: gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
} as const;
