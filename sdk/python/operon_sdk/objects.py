"""Building objects: :func:`new_object` and status :class:`Condition` s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .kinds import Gvk


def new_object(
    kind: Gvk,
    name: str,
    *,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **body: Any,
) -> dict:
    """A Kubernetes object as a dict: ``apiVersion``, ``kind``, ``metadata`` and
    the top-level fields in ``body`` (``spec=...``, ``data=...``).

    The namespace is usually left out: the host puts children in the parent's.

    >>> from operon_sdk.kinds import CONFIG_MAP
    >>> new_object(CONFIG_MAP, "hello-greeting", data={"message": "hi"})
    {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'hello-greeting'}, 'data': {'message': 'hi'}}
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, **body}


@dataclass
class Condition:
    """A ``metav1.Condition``. Timestamps stay text (RFC 3339), so they round-trip exactly."""

    type: str
    status: str
    last_transition_time: str
    reason: str
    message: str
    observed_generation: int | None = None

    @property
    def is_true(self) -> bool:
        """``status == "True"``."""
        return self.status == "True"


def find_condition(conditions: Iterable[Condition] | None, type: str) -> Condition | None:
    """The condition of ``type``, or None."""
    return next((c for c in conditions or () if c.type == type), None)


def transition_time(previous: Condition | None, status: str, changed_at: str) -> str:
    """``lastTransitionTime`` of a condition now ``status``: the previous one's
    while its status holds, else ``changed_at``.

    Pass ``request.now`` as ``changed_at``, never a clock reading: the host's
    time for the call, so the outcome is a function of the request (and
    fixtures can fix it).
    """
    if previous is not None and previous.status == status:
        return previous.last_transition_time
    return changed_at
