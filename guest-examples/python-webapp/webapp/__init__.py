"""Example Operon reconciler in Python: a ``WebApp`` (``example.operon.dev/v1alpha1``)
yields a Deployment, a ClusterIP Service and, when ``spec.ingress`` is set, an
Ingress.

The same reconciler as ``guest-examples/rust-webapp`` (whose ``src/lib.rs``
documents the rules); ``guest-examples/webapp/fixtures`` pins both.

- **Children** are named after the WebApp and labelled
  ``app.kubernetes.io/name=<name>``, ``app.kubernetes.io/managed-by=operon``.
- **Status**: ``observedGeneration``, ``readyReplicas`` and a ``Ready``
  condition from the children's readiness the host hands in (a missing
  child, a Deployment not yet running the spec, a child not current, else
  ready), whose ``lastTransitionTime`` is ``request.now``, never the clock.
- **Events** only when something is about to change: ``Created``,
  ``Scaled``, ``Updated``, ``IngressCreated``, ``IngressRemoved``,
  ``Available``, and ``Cleanup`` when the WebApp is deleted.
- **No requeue**: the Deployment is owned, so its changes reconcile the WebApp.
- **Finalizer**: every outcome needs it; the answer to a finalizing request
  releases it.
- **Failures**: a spec that does not parse or validate is terminal, and
  carries a status saying so (``Ready`` ``False``, ``InvalidSpec``).
- **Admission**: ``validate`` refuses a blank image and out-of-range
  replicas or port; ``mutate`` defaults ``spec.port`` to 8080.
- **Conversion**: ``convert`` between ``v1alpha1`` and ``v1``
  (:mod:`webapp.conversion`).
"""

from __future__ import annotations

import json
from typing import Any

from operon_sdk import (
    DEPLOYMENT,
    INGRESS,
    SERVICE,
    Condition,
    Context,
    Denied,
    Failure,
    Manifest,
    Operation,
    Outcome,
    Reconciler,
    Request,
    Review,
    Terminal,
)

from . import children, conversion
from .status import invalid, is_ready, previous_ready, status
from .types import WEBAPP, Deployment, WebApp, WebAppSpec, WebAppStatus

FINALIZER = "example.operon.dev/cleanup"
"""The finalizer every WebApp's outcome asks for."""

MAX_REPLICAS = 50
"""The most replicas admission lets a WebApp ask for."""
DEFAULT_PORT = 8080


class WebAppReconciler(Reconciler[WebApp]):
    """The WebApp reconciler."""

    def manifest(self) -> Manifest:
        return Manifest("webapp", WEBAPP, owns=[DEPLOYMENT, SERVICE, INGRESS], finalizer=FINALIZER)

    def reconcile(self, request: Request[WebApp], ctx: Context) -> Outcome:
        name = request.name
        if request.finalizing:
            # Nothing outside the cluster to clean up; the children go with the WebApp.
            return (
                Outcome()
                .event("Cleanup", f"webapp {name} deleted; its children are deleted with it")
                .finish()
                .needs_finalizer(False)
            )
        spec = request.object.spec
        existing = request.child(DEPLOYMENT, name, as_type=Deployment)
        previous = previous_ready(request.raw)
        try:
            spec.validate()
        except Terminal as failure:
            raise failure.with_status(invalid(request, previous, existing, failure.message)) from None

        had_ingress = request.has_child(INGRESS, name)
        new_status = status(request, spec, previous, existing)

        outcome = Outcome().apply(children.deployment(name, spec)).apply(children.service(name, spec))
        ingress = children.ingress(name, spec)
        if ingress is not None:
            outcome.apply(ingress)
        for reason, message in events(name, spec, existing, had_ingress, previous, new_status):
            outcome.event(reason, message)
        return outcome.set_status(new_status).needs_finalizer(True)

    def invalid(self, request: Request[dict], failure: Terminal) -> Failure:
        """A WebApp whose spec does not parse says so in its status too."""
        try:
            existing = request.child(DEPLOYMENT, request.name, as_type=Deployment)
        except Terminal:
            existing = None  # a Deployment we cannot read has no ready replicas to report
        return failure.with_status(invalid(request, previous_ready(request.raw), existing, failure.message))

    def convert(self, objects: list[dict], desired_api_version: str) -> list[dict]:
        """Serves the CRD's conversion webhook: ``v1alpha1`` ↔ ``v1``."""
        return conversion.convert(objects, desired_api_version)

    def validate(self, review: Review, ctx: Context) -> list[str]:
        """Refuses what the reconciler would fail on, before it is stored."""
        if review.operation in (Operation.DELETE, Operation.CONNECT):
            return []
        spec = _spec(review.object)
        image = spec.get("image")
        if not isinstance(image, str) or not image.strip():
            raise Denied("spec.image must not be empty")
        # A null field counts as absent; an integral float (3.0) as an integer.
        if spec.get("replicas") is not None and not _int_in(spec["replicas"], 0, MAX_REPLICAS):
            raise Denied(f"spec.replicas must be between 0 and {MAX_REPLICAS}, not {_text(spec['replicas'])}")
        if spec.get("port") is not None and not _int_in(spec["port"], 1, 65535):
            raise Denied(f"spec.port must be between 1 and 65535, not {_text(spec['port'])}")
        return []

    def mutate(self, review: Review, ctx: Context) -> dict | None:
        """Defaults ``spec.port`` to 8080 on create and update."""
        if review.operation not in (Operation.CREATE, Operation.UPDATE) or review.object is None:
            return None
        obj = review.object
        spec = obj.get("spec")
        if spec is None:
            spec = obj["spec"] = {}
        if not isinstance(spec, dict) or spec.get("port") is not None:
            return None
        spec["port"] = DEFAULT_PORT
        return obj


def _spec(obj: dict | None) -> dict:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


def _int_in(value: Any, low: int, high: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and low <= value <= high


def _text(value: Any) -> str:
    """The value as JSON text (``51``, ``"3"``, ``2.5``), as the Rust host prints it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def events(
    name: str,
    spec: WebAppSpec,
    existing: Deployment | None,
    had_ingress: bool,
    previous: Condition | None,
    new_status: WebAppStatus,
) -> list[tuple[str, str]]:
    """The events of one reconcile: what the outcome is about to change."""
    out = []
    if existing is None:
        out.append(("Created", f"creating deployment and service {name} ({spec.replicas} x {spec.image})"))
    else:
        if existing.replicas != spec.replicas:
            out.append(("Scaled", f"scaling deployment {name} from {existing.replicas} to {spec.replicas} replicas"))
        image = existing.image or ""
        if image != spec.image:
            out.append(("Updated", f"updating deployment {name} from image {image} to {spec.image}"))
    if spec.ingress is not None and not had_ingress:
        path = spec.ingress.path if spec.ingress.path is not None else "/"
        out.append(("IngressCreated", f"exposing service {name} at {spec.ingress.host}{path}"))
    elif spec.ingress is None and had_ingress:
        out.append(("IngressRemoved", f"deleting ingress {name}: spec.ingress was removed"))
    if is_ready(new_status) and not (previous is not None and previous.status == "True"):
        out.append(("Available", f"all {spec.replicas} replicas of {name} are ready"))
    return out
