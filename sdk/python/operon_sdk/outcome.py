"""What a reconcile wants: :class:`Outcome`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .failure import Terminal
from .kinds import Gvk
from .readiness import format_time, parse_time
from .typed import to_json


@dataclass(frozen=True)
class Event:
    """An event to record on the parent (events.k8s.io/v1)."""

    reason: str
    """A short UpperCamelCase machine-readable reason, e.g. ``Scaled``."""
    message: str
    """Human-readable text."""
    warning: bool = False
    """``Warning`` when true, ``Normal`` otherwise."""


@dataclass(frozen=True)
class ParentMetadata:
    """The labels and annotations a reconciler keeps on its parent."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class RawOutcome:
    """The WIT ``outcome`` record: objects as JSON text. ``needs_finalizer``
    None is the SDK's default, settled by :func:`operon_sdk.run.reconcile`."""

    desired: list[str] = field(default_factory=list)
    status: str | None = None
    events: list[Event] = field(default_factory=list)
    requeue_after_ms: int | None = None
    finalized: bool = False
    requeue_at: str | None = None
    needs_finalizer: bool | None = None
    parent_metadata: ParentMetadata | None = None


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Outcome:
    """What a reconcile wants: the children that should exist, the parent's new
    status, events, when to run again, whether the parent needs the
    finalizer, its labels and annotations and, while finalizing, whether
    clean-up is done.

    An outcome is the whole truth for the parent: children that exist but are
    not applied are deleted, and the status replaces the current one. Build it
    from the request alone, the same way every time (reconciliation is
    level-based: the host may call again with the same request at any time).

    Methods return the outcome, so calls chain:

    >>> out = (Outcome()
    ...        .apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-settings"}})
    ...        .set_status({"phase": "Pending"})
    ...        .event("Configured", "wrote configmap web-settings")
    ...        .requeue_after(30))
    >>> out.to_raw().requeue_after_ms
    30000
    """

    def __init__(self) -> None:
        self.desired: list[dict] = []
        self.status: dict | None = None
        self.events: list[Event] = []
        self.requeue_after_ms: int | None = None
        self.requeue_time: str | None = None
        self.finalized: bool = False
        self.finalizer_needed: bool | None = None
        self.parent_meta: ParentMetadata | None = None

    def apply(self, obj: Any, kind: Gvk | None = None) -> Outcome:
        """Wants ``obj`` (a dict, or a dataclass written with camelCase keys) to exist.

        The host sets its namespace to the parent's when missing, adds the
        controller ownerReference and server-side applies it. Its kind must be
        in ``manifest.owns``; ``kind`` fills ``apiVersion`` and ``kind`` when
        the object lacks them.

        Raises:
            Terminal: the object is not a JSON object or has no apiVersion/kind.
        """
        value = to_json(obj)
        if not isinstance(value, dict):
            raise Terminal("a desired object must be a JSON object")
        if kind is not None:
            value = {"apiVersion": kind.api_version, "kind": kind.kind, **value}
        for key in ("apiVersion", "kind"):
            if not isinstance(value.get(key), str):
                meta = value.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                raise Terminal(f"desired object {name or '<unnamed>'} has no {key}: set it, or pass kind=")
        self.desired.append(value)
        return self

    def set_status(self, status: Any) -> Outcome:
        """Sets the parent's new ``status`` (a dict or a dataclass), replacing the
        current one; written only when it differs. Without it the status is left
        untouched. Keep it deterministic: times come from ``request.now``.

        Raises:
            Terminal: the status is not a JSON object.
        """
        value = to_json(status)
        if not isinstance(value, dict):
            raise Terminal("the status must be a JSON object")
        self.status = value
        return self

    def event(self, reason: str, message: str) -> Outcome:
        """Records a ``Normal`` event on the parent."""
        self.events.append(Event(reason, message, False))
        return self

    def warning(self, reason: str, message: str) -> Outcome:
        """Records a ``Warning`` event on the parent."""
        self.events.append(Event(reason, message, True))
        return self

    def requeue_after(self, delay: float | timedelta) -> Outcome:
        """Reconcile again after ``delay`` (seconds, or a timedelta) even if nothing
        changes, e.g. to poll something outside the cluster. Rounded down to
        milliseconds; the host raises values below its floor (100 ms)."""
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(f"requeue_after needs a finite delay of 0 or more, not {delay!r}")
        self.requeue_after_ms = int(seconds * 1000)
        return self

    def requeue_at(self, time: str | datetime) -> Outcome:
        """Reconcile again at ``time`` even if nothing changes: schedules,
        expiries, TTLs. An RFC 3339 string (``2026-11-26T05:00:00Z``, kept as
        it is) or an aware ``datetime``. The host measures it from
        ``request.now`` (a time already past means its floor); with
        :meth:`requeue_after` too, the earlier wins.

        Raises:
            ValueError: not an RFC 3339 time, or a naive ``datetime``.
        """
        if isinstance(time, datetime):
            self.requeue_time = format_time(time)
        else:
            parse_time(time)  # the host refuses an outcome whose time does not parse
            self.requeue_time = time
        return self

    def needs_finalizer(self, needed: bool = True) -> Outcome:
        """Whether this parent needs the manifest's finalizer (clean-up when it
        is deleted): the host adds it while outcomes say so and releases it
        when one says not.

        Without this call the answer is: yes when the manifest names a
        finalizer, except while ``request.finalizing`` (no without one).
        """
        self.finalizer_needed = bool(needed)
        return self

    def parent_metadata(
        self, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
    ) -> Outcome:
        """Keeps these labels and annotations on the parent (a decorator's
        marks): the host applies them under the plugin's field manager, so a key
        a later outcome leaves out is removed and keys others set stay. Without
        this call the parent's metadata is left alone. Keys under
        ``operon.dev/`` and labels the Reconciler's selector reads are refused.
        """
        labels, annotations = dict(labels or {}), dict(annotations or {})
        for what, pairs in (("label", labels), ("annotation", annotations)):
            for key, value in pairs.items():
                if not isinstance(key, str) or not isinstance(value, str):
                    raise TypeError(f"parent {what} {key!r}: keys and values must be strings, not {value!r}")
        self.parent_meta = ParentMetadata(labels, annotations)
        return self

    def finish(self) -> Outcome:
        """Clean-up is complete: the host may remove the finalizer (only meaningful
        when ``request.finalizing``)."""
        self.finalized = True
        return self

    def to_raw(self) -> RawOutcome:
        """The WIT record (objects as compact JSON)."""
        try:
            return RawOutcome(
                desired=[_dumps(o) for o in self.desired],
                status=None if self.status is None else _dumps(self.status),
                events=list(self.events),
                requeue_after_ms=self.requeue_after_ms,
                finalized=self.finalized,
                requeue_at=self.requeue_time,
                needs_finalizer=self.finalizer_needed,
                parent_metadata=self.parent_meta,
            )
        except (TypeError, ValueError) as error:
            raise Terminal(f"cannot serialize the outcome: {error}") from None
