"""Example Operon reconciler in Python driven by the clock: a ``ScheduledScale``
(``example.operon.dev/v1alpha1``, see ``../scheduledscale/crd.yaml``) keeps a
Deployment at the replicas its daily schedule says.

.. code-block:: yaml

    spec:
      image: nginx:1.27
      schedule:                      # times of day, UTC
        - {at: "08:00", replicas: 3}
        - {at: "20:00", replicas: 1}

The same reconciler as ``guest-examples/rust-scheduledscale`` (whose
``src/lib.rs`` documents the rules); ``guest-examples/scheduledscale/fixtures``
pins both.

- **The time is an input**: the entry in force is the one whose time came
  last before ``request.now`` (yesterday's last one before the day's first);
  nothing reads a clock, so fixtures pin the time with ``now:`` and the same
  request always gives the same outcome.
- **Child**: a Deployment named after the ScheduledScale, with the entry's
  replicas.
- **Requeue at the next change**: ``Outcome.requeue_at`` is the next entry's
  time, so the host wakes the reconciler when the schedule turns (and owned
  Deployment changes wake it in between).
- **Status**: ``observedGeneration``, ``replicas``, ``activeSince`` and
  ``nextChange`` (RFC 3339, seconds, UTC).
- **Events**: ``Created`` (no Deployment yet) and ``Scaled`` (the
  Deployment's replicas differ from the entry's).
- **Failures**: an empty image or schedule, a time that is not
  ``HH:MM[:SS]``, negative replicas or a time listed twice are terminal.
"""

from __future__ import annotations

from operon_sdk import DEPLOYMENT, Context, Manifest, Outcome, Reconciler, Request

from . import schedule
from .schedule import Turn
from .types import SCHEDULED_SCALE, Entry, Existing, ScheduledScale, ScheduledScaleSpec, ScheduledScaleStatus

__all__ = [
    "SCHEDULED_SCALE",
    "Entry",
    "ScheduledScale",
    "ScheduledScaleReconciler",
    "ScheduledScaleSpec",
    "ScheduledScaleStatus",
    "Turn",
    "deployment",
]


class ScheduledScaleReconciler(Reconciler[ScheduledScale]):
    """The ScheduledScale reconciler."""

    def manifest(self) -> Manifest:
        return Manifest("scheduledscale", SCHEDULED_SCALE, owns=[DEPLOYMENT])

    def reconcile(self, request: Request[ScheduledScale], ctx: Context) -> Outcome:
        name = request.name
        spec = request.object.spec
        schedule.validate(spec)
        turn = schedule.turn(spec.schedule, request.now_time)
        active = turn.active
        outcome = Outcome().apply(deployment(name, spec.image, active.replicas))
        existing = request.child(DEPLOYMENT, name, as_type=Existing)
        if existing is None:
            outcome.event("Created", f"creating deployment {name} with {active.replicas} replicas ({active.at} entry)")
        elif existing.replicas != active.replicas:
            outcome.event(
                "Scaled",
                f"scaling deployment {name} from {existing.replicas} to {active.replicas} replicas ({active.at} entry)",
            )
        status = ScheduledScaleStatus(
            observed_generation=request.generation,
            replicas=active.replicas,
            active_since=schedule.rfc3339(turn.active_since),
            next_change=schedule.rfc3339(turn.next_change),
        )
        return outcome.set_status(status).requeue_at(turn.next_change)


def deployment(name: str, image: str, replicas: int) -> dict:
    """The Deployment: ``replicas`` pods of one container (``app``) running ``image``."""
    labels = {"app.kubernetes.io/managed-by": "operon", "app.kubernetes.io/name": name}
    return {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    }
