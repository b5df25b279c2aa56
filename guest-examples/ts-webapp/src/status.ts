/** The WebApp's status: ready replicas and the `Ready` condition, from the Deployment the request carries. */

import { type Condition, findCondition, transitionTime } from "@operon/sdk";
import { type Deployment, type WebAppSpec, type WebAppStatus, imageOf, replicasOf } from "./webapp.js";

export const READY = "Ready";
const EPOCH = "1970-01-01T00:00:00Z";

/** What the existing Deployment says about the rollout. */
interface Rollout {
  readyReplicas: number;
  exists: boolean;
  /** The Deployment runs the spec, its controller has seen its latest generation and every replica is updated. */
  current: boolean;
}

function observe(deployment: Deployment | undefined, spec: WebAppSpec): Rollout {
  if (!deployment) return { readyReplicas: 0, exists: false, current: false };
  const status = deployment.status;
  const readyReplicas = status?.readyReplicas ?? 0;
  const updated = status?.updatedReplicas ?? 0;
  const observed = status?.observedGeneration ?? 0;
  const generation = deployment.metadata.generation ?? 0;
  return {
    readyReplicas,
    exists: true,
    current:
      replicasOf(deployment) === spec.replicas &&
      imageOf(deployment) === spec.image &&
      observed >= generation &&
      updated >= spec.replicas,
  };
}

/**
 * The new status. `lastTransitionTime` never reads the clock: it is kept from
 * the existing `Ready` condition while its status holds; on a change it is
 * the latest time the request shows (the Deployment's condition timestamps,
 * the previous transition, the WebApp's creation), a lower bound of the real
 * transition time that never goes backwards.
 */
export function status(
  spec: WebAppSpec,
  generation: number,
  creationTimestamp: string | undefined,
  previous: WebAppStatus | undefined,
  deployment: Deployment | undefined,
  name: string,
): WebAppStatus {
  const rollout = observe(deployment, spec);
  const ready = rollout.current && rollout.readyReplicas >= spec.replicas;
  const [value, reason] = ready ? ["True", "Available"] : ["False", "Progressing"];
  const counts = `${rollout.readyReplicas} of ${spec.replicas} replicas ready`;
  const message = ready
    ? counts
    : !rollout.exists
      ? `deployment ${name} does not exist yet`
      : !rollout.current
        ? `deployment ${name} is being updated: ${counts}`
        : counts;
  const before = findCondition(previous?.conditions, READY);
  const condition: Condition = {
    type: READY,
    status: value,
    observedGeneration: generation,
    lastTransitionTime: transitionTime(before, value, latestTime(deployment, before, creationTimestamp)),
    reason,
    message,
  };
  return { observedGeneration: generation, readyReplicas: rollout.readyReplicas, conditions: [condition] };
}

/** The newest timestamp among the Deployment's conditions, the previous `Ready` transition and the creation. */
function latestTime(deployment: Deployment | undefined, previous: Condition | undefined, created: string | undefined) {
  const times: string[] = [];
  for (const c of deployment?.status?.conditions ?? []) {
    for (const t of [c.lastUpdateTime, c.lastTransitionTime]) if (t !== undefined) times.push(t);
  }
  if (previous) times.push(previous.lastTransitionTime);
  if (created !== undefined) times.push(created);
  return times.reduce((latest, t) => (t > latest ? t : latest), times[0] ?? EPOCH);
}

/** The `Ready` condition is `True`. */
export function isReady(status: WebAppStatus | undefined): boolean {
  return status?.conditions.some((c) => c.type === READY && c.status === "True") ?? false;
}
