"""The WebApp's status: ready replicas and the ``Ready`` condition, from the
children's readiness the host hands in (contract 0.2): no rollout arithmetic
here, kstatus's rules are the host's."""

from __future__ import annotations

from typing import Any

from operon_sdk import DEPLOYMENT, INGRESS, SERVICE, Condition, Gvk, ReadinessStatus, Request, transition_time

from .types import Deployment, WebAppSpec, WebAppStatus

READY = "Ready"


def verdict(request: Request[Any], spec: WebAppSpec, deployment: Deployment | None) -> tuple[bool, str, str]:
    """Whether the WebApp is ready, and why: ``(ready, reason, message)`` of
    the ``Ready`` condition. The first that applies wins: a wanted child is
    missing; the Deployment does not run the spec yet; a wanted child is not
    current; else ready."""
    name = request.name
    wanted: list[Gvk] = [DEPLOYMENT, SERVICE] + ([INGRESS] if spec.ingress is not None else [])
    ready = ready_replicas(deployment)
    missing = next((kind for kind in wanted if request.readiness(kind, name) is None), None)
    if missing is not None:
        return False, "Progressing", f"{missing.kind.lower()} {name} does not exist yet"
    if deployment is not None and (deployment.replicas != spec.replicas or deployment.image != spec.image):
        return False, "Progressing", f"deployment {name} is being updated: {ready} of {spec.replicas} replicas ready"
    for kind in wanted:
        rated = request.readiness(kind, name)
        if rated is not None and not rated.is_current:
            reason = "Failed" if rated.status is ReadinessStatus.FAILED else "Progressing"
            return False, reason, f"{kind.kind} {name}: {rated.message}"
    return True, "Available", f"{ready} of {spec.replicas} replicas ready"


def ready_replicas(deployment: Deployment | None) -> int:
    """``status.readyReplicas`` of the Deployment (0 without one)."""
    status = deployment.status if deployment is not None else None
    return (status.ready_replicas if status is not None else None) or 0


def status(
    request: Request[Any], spec: WebAppSpec, previous: Condition | None, deployment: Deployment | None
) -> WebAppStatus:
    """The new status: ``observedGeneration``, ``readyReplicas`` and the ``Ready`` condition of :func:`verdict`."""
    ready, reason, message = verdict(request, spec, deployment)
    return with_ready(request, previous, ready_replicas(deployment), ready, reason, message)


def invalid(
    request: Request[Any], previous: Condition | None, deployment: Deployment | None, message: str
) -> WebAppStatus:
    """The status of a WebApp whose spec is invalid: ``Ready`` ``False``,
    ``InvalidSpec``, the failure's message. The terminal failure carries it, so
    the WebApp says what is wrong while the host waits for a fix."""
    return with_ready(request, previous, ready_replicas(deployment), False, "InvalidSpec", message)


def with_ready(
    request: Request[Any], previous: Condition | None, ready_replicas: int, ready: bool, reason: str, message: str
) -> WebAppStatus:
    """A status with one ``Ready`` condition. ``lastTransitionTime`` is kept
    while the condition's status holds, else it is ``request.now`` (the host's
    clock for this call, so the outcome stays a function of the request)."""
    value = "True" if ready else "False"
    generation = request.generation
    return WebAppStatus(
        observed_generation=generation,
        ready_replicas=ready_replicas,
        conditions=[
            Condition(
                type=READY,
                status=value,
                observed_generation=generation,
                last_transition_time=transition_time(previous, value, request.now),
                reason=reason,
                message=message,
            )
        ],
    )


def previous_ready(parent: dict) -> Condition | None:
    """The parent's current ``Ready`` condition, read leniently from the raw
    object (the typed parent may be what failed to parse)."""
    status = parent.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == READY and isinstance(c.get("status"), str):
            time = c.get("lastTransitionTime")
            return Condition(
                type=READY,
                status=c["status"],
                last_transition_time=time if isinstance(time, str) else "",
                reason=str(c.get("reason", "")),
                message=str(c.get("message", "")),
            )
    return None


def is_ready(status: WebAppStatus | None) -> bool:
    """The ``Ready`` condition is ``True``."""
    return status is not None and any(c.type == READY and c.status == "True" for c in status.conditions)
