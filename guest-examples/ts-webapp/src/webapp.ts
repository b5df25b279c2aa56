/**
 * The `WebApp` custom resource (`example.operon.dev/v1alpha1`, as in
 * `../webapp/crd.yaml`) and the slim view of the Deployments it owns, as
 * schemas: types that are also checked at run time.
 */

import { type Condition, Terminal, gvk, s } from "@operon/sdk";

export const WEBAPP = gvk("example.operon.dev", "v1alpha1", "WebApp");

const EnvVar = s.object({ name: s.string(), value: s.withDefault(s.string(), "") });

const IngressSpec = s.object({
  host: s.string(),
  path: s.optional(s.string()),
  className: s.optional(s.string()),
});

/** `spec`. Defaults match the CRD's, so an object that skipped the API server's defaulting reads the same. */
export const WebAppSpec = s.object({
  image: s.string(),
  replicas: s.withDefault(s.i32(), 1),
  port: s.withDefault(s.i32(), 8080),
  env: s.withDefault(s.array(EnvVar), () => []),
  ingress: s.optional(IngressSpec),
});
export type WebAppSpec = s.Infer<typeof WebAppSpec>;

const ConditionSchema: s.Schema<Condition> = s.object({
  type: s.string(),
  status: s.string(),
  observedGeneration: s.optional(s.i64()),
  lastTransitionTime: s.string(),
  reason: s.string(),
  message: s.string(),
});

/** `status`: the generation it describes, ready pods and the `Ready` condition. */
export const WebAppStatus = s.object({
  observedGeneration: s.withDefault(s.i64(), 0),
  readyReplicas: s.withDefault(s.i32(), 0),
  conditions: s.withDefault(s.array(ConditionSchema), () => []),
});
export type WebAppStatus = s.Infer<typeof WebAppStatus>;

/** A web application. Only `spec` and `status`: the SDK reads `metadata`. */
export const WebApp = s.object({ spec: WebAppSpec, status: s.optional(WebAppStatus) });
export type WebApp = s.Infer<typeof WebApp>;

/**
 * Checks what the CRD schema also checks, for objects that did not go through
 * it (fixtures, an API server without the schema).
 * @throws {Terminal} retrying an invalid spec cannot help.
 */
export function validate(spec: WebAppSpec): void {
  if (!spec.image.trim()) throw new Terminal("spec.image must not be empty");
  if (spec.replicas < 0) throw new Terminal(`spec.replicas must be 0 or more, not ${spec.replicas}`);
  if (spec.port < 1 || spec.port > 65535) {
    throw new Terminal(`spec.port must be between 1 and 65535, not ${spec.port}`);
  }
  spec.env.forEach((variable, index) => {
    if (!variable.name) throw new Terminal(`spec.env[${index}].name must not be empty`);
    if (spec.env.slice(0, index).some((earlier) => earlier.name === variable.name)) {
      throw new Terminal(`spec.env[${index}]: ${variable.name} is set twice`);
    }
  });
  if (spec.ingress) {
    if (!spec.ingress.host) throw new Terminal("spec.ingress.host must not be empty");
    if (spec.ingress.path !== undefined && !spec.ingress.path.startsWith("/")) {
      throw new Terminal("spec.ingress.path must start with /");
    }
  }
}

/** The fields of an existing Deployment this reconciler reads: what it runs, and its ready pods. */
export const Deployment = s.object({
  spec: s.optional(
    s.object({
      replicas: s.optional(s.i32()),
      template: s.withDefault(
        s.object({
          spec: s.withDefault(
            s.object({ containers: s.withDefault(s.array(s.object({ image: s.optional(s.string()) })), () => []) }),
            () => ({ containers: [] }),
          ),
        }),
        () => ({ spec: { containers: [] } }),
      ),
    }),
  ),
  status: s.optional(s.object({ readyReplicas: s.optional(s.i32()) })),
});
export type Deployment = s.Infer<typeof Deployment>;

/** `spec.replicas`, 1 when unset (the API server's default). */
export function replicasOf(deployment: Deployment): number {
  return deployment.spec?.replicas ?? 1;
}

/** The first container's image. */
export function imageOf(deployment: Deployment): string | undefined {
  return deployment.spec?.template.spec.containers[0]?.image;
}
