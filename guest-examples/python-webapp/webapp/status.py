"""The WebApp's status: ready replicas and the ``Ready`` condition, from the
Deployment the request carries."""

from __future__ import annotations

from dataclasses import dataclass

from operon_sdk import Condition, find_condition, transition_time

from .types import Deployment, WebAppSpec, WebAppStatus

READY = "Ready"
EPOCH = "1970-01-01T00:00:00Z"


@dataclass
class Rollout:
    """What the existing Deployment says about the rollout."""

    ready_replicas: int
    exists: bool
    current: bool
    """The Deployment runs the spec (image, replicas), its controller has seen
    its latest generation and every replica is updated."""

    @staticmethod
    def observe(deployment: Deployment | None, spec: WebAppSpec) -> Rollout:
        if deployment is None:
            return Rollout(0, False, False)
        status = deployment.status
        ready = (status.ready_replicas if status else None) or 0
        updated = (status.updated_replicas if status else None) or 0
        observed = (status.observed_generation if status else None) or 0
        generation = deployment.metadata.generation or 0
        current = (
            deployment.replicas == spec.replicas
            and deployment.image == spec.image
            and observed >= generation
            and updated >= spec.replicas
        )
        return Rollout(ready, True, current)

    def ready(self, spec: WebAppSpec) -> bool:
        """The rollout is current and at least ``spec.replicas`` pods are ready."""
        return self.current and self.ready_replicas >= spec.replicas


def status(
    spec: WebAppSpec,
    generation: int,
    creation_timestamp: str | None,
    previous: WebAppStatus | None,
    deployment: Deployment | None,
    name: str,
) -> WebAppStatus:
    """The new status.

    ``lastTransitionTime`` never reads the clock: it is kept from the existing
    ``Ready`` condition while its status holds; on a change it is the latest
    time the request shows (the Deployment's condition timestamps, the
    previous transition, the WebApp's creation), a lower bound of the real
    transition time that never goes backwards.
    """
    rollout = Rollout.observe(deployment, spec)
    ready = rollout.ready(spec)
    value, reason = ("True", "Available") if ready else ("False", "Progressing")
    counts = f"{rollout.ready_replicas} of {spec.replicas} replicas ready"
    if ready:
        message = counts
    elif not rollout.exists:
        message = f"deployment {name} does not exist yet"
    elif not rollout.current:
        message = f"deployment {name} is being updated: {counts}"
    else:
        message = counts
    before = find_condition(previous.conditions if previous else None, READY)
    changed_at = latest_time(deployment, before, creation_timestamp)
    return WebAppStatus(
        observed_generation=generation,
        ready_replicas=rollout.ready_replicas,
        conditions=[
            Condition(
                type=READY,
                status=value,
                observed_generation=generation,
                last_transition_time=transition_time(before, value, changed_at),
                reason=reason,
                message=message,
            )
        ],
    )


def latest_time(deployment: Deployment | None, previous: Condition | None, creation_timestamp: str | None) -> str:
    """The newest timestamp among the Deployment's conditions, the previous
    ``Ready`` transition and the WebApp's creation (the epoch if none)."""
    times: list[str] = []
    if deployment is not None and deployment.status is not None:
        for condition in deployment.status.conditions:
            times += [t for t in (condition.last_update_time, condition.last_transition_time) if t is not None]
    if previous is not None:
        times.append(previous.last_transition_time)
    if creation_timestamp is not None:
        times.append(creation_timestamp)
    return max(times, default=EPOCH)


def is_ready(status: WebAppStatus | None) -> bool:
    """The ``Ready`` condition is ``True``."""
    return status is not None and any(c.type == READY and c.status == "True" for c in status.conditions)
