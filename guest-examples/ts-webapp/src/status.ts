/**
 * The WebApp's status: `readyReplicas` and one `Ready` condition, from the
 * children the request carries and the readiness the host gives each.
 */

import { type Condition, type Gvk, type Request, findCondition, kinds, transitionTime } from "@operon/sdk";
import { type Deployment, type WebAppSpec, type WebAppStatus, imageOf, replicasOf } from "./webapp.js";

export const READY = "Ready";

/** The `Ready` condition's verdict: status, reason and message. */
type Verdict = [status: "True" | "False", reason: string, message: string];

/** The Deployment child's `status.readyReplicas`, else 0. */
export function readyReplicasOf(deployment: Deployment | undefined): number {
  return deployment?.status?.readyReplicas ?? 0;
}

/** The children a WebApp wants, in the order they are checked. */
function wanted(spec: WebAppSpec): Gvk[] {
  return spec.ingress ? [kinds.Deployment, kinds.Service, kinds.Ingress] : [kinds.Deployment, kinds.Service];
}

/**
 * Why the WebApp is or is not ready, the first that applies: a wanted child
 * is missing; the Deployment does not run the spec yet; a wanted child is not
 * `current` (its readiness, as the host rates it); else ready.
 */
function verdict(request: Request<unknown>, spec: WebAppSpec, deployment: Deployment | undefined): Verdict {
  const name = request.name;
  const readyReplicas = readyReplicasOf(deployment);
  const missing = wanted(spec).find((kind) => !request.hasChild(kind, name));
  if (missing) return ["False", "Progressing", `${missing.kind.toLowerCase()} ${name} does not exist yet`];
  if (!deployment || replicasOf(deployment) !== spec.replicas || imageOf(deployment) !== spec.image) {
    return ["False", "Progressing", `deployment ${name} is being updated: ${readyReplicas} of ${spec.replicas} replicas ready`];
  }
  for (const kind of wanted(spec)) {
    const readiness = request.readiness(kind, name);
    if (readiness && readiness.status !== "current") {
      const reason = readiness.status === "failed" ? "Failed" : "Progressing";
      return ["False", reason, `${kind.kind} ${name}: ${readiness.message}`];
    }
  }
  return ["True", "Available", `${readyReplicas} of ${spec.replicas} replicas ready`];
}

/**
 * A status with `Ready` at `verdict`. `lastTransitionTime` is the previous
 * `Ready` condition's while its status holds, else `request.now` as the host
 * gave it: the outcome stays a function of the request.
 */
function statusWith(
  request: Request<unknown>,
  previous: WebAppStatus | undefined,
  readyReplicas: number,
  [value, reason, message]: Verdict,
): WebAppStatus {
  const generation = request.generation;
  const condition: Condition = {
    type: READY,
    status: value,
    observedGeneration: generation,
    lastTransitionTime: transitionTime(findCondition(previous?.conditions, READY), value, request.now),
    reason,
    message,
  };
  return { observedGeneration: generation, readyReplicas, conditions: [condition] };
}

/** The status of a valid WebApp. */
export function status(
  request: Request<unknown>,
  spec: WebAppSpec,
  previous: WebAppStatus | undefined,
  deployment: Deployment | undefined,
): WebAppStatus {
  return statusWith(request, previous, readyReplicasOf(deployment), verdict(request, spec, deployment));
}

/** The status an invalid WebApp's terminal failure carries: `Ready` False, `InvalidSpec`, the failure's message. */
export function invalidStatus(
  request: Request<unknown>,
  message: string,
  previous: WebAppStatus | undefined,
  deployment: Deployment | undefined,
): WebAppStatus {
  return statusWith(request, previous, readyReplicasOf(deployment), ["False", "InvalidSpec", message]);
}

/** The `Ready` condition is `True`. */
export function isReady(status: WebAppStatus | undefined): boolean {
  return status?.conditions.some((c) => c.type === READY && c.status === "True") ?? false;
}
