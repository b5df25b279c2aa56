"""One call of ``reconcile``: :class:`Request`, with the parent typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from .failure import Terminal
from .kinds import Gvk
from .readiness import EPOCH, Readiness, parse_time
from .typed import TypeMismatch, from_json

T = TypeVar("T")


@dataclass
class Metadata:
    """The parent's ``metadata``, as far as reconcilers commonly need it.

    Missing fields are empty (``""``, None, empty dicts and lists).
    """

    name: str = ""
    namespace: str | None = None
    uid: str = ""
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)

    @staticmethod
    def of(obj: dict) -> Metadata:
        """Read leniently from a JSON object (anything of the wrong type reads as empty)."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}

        def text(key: str) -> str | None:
            value = meta.get(key)
            return value if isinstance(value, str) else None

        def strings(key: str) -> dict[str, str]:
            value = meta.get(key)
            return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

        generation = meta.get("generation")
        finalizers = meta.get("finalizers")
        return Metadata(
            name=text("name") or "",
            namespace=text("namespace"),
            uid=text("uid") or "",
            generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
            resource_version=text("resourceVersion"),
            creation_timestamp=text("creationTimestamp"),
            deletion_timestamp=text("deletionTimestamp"),
            labels=strings("labels"),
            annotations=strings("annotations"),
            finalizers=[f for f in finalizers if isinstance(f, str)] if isinstance(finalizers, list) else [],
        )


def describe(obj: dict) -> str:
    """``Kind namespace/name`` (or ``Kind name``) for messages."""
    meta = Metadata.of(obj)
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else ""
    return f"{kind} {meta.namespace}/{meta.name}" if meta.namespace is not None else f"{kind} {meta.name}"


def parse_object(tp: Any, obj: dict) -> Any:
    """``obj`` read as ``tp`` (``dict`` or None: as it is).

    Raises:
        Terminal: ``Kind ns/name is invalid: <why>`` when it does not fit.
    """
    if tp is None or tp is dict:
        return obj
    try:
        return from_json(tp, obj)
    except TypeMismatch as error:
        raise Terminal(f"{describe(obj)} is invalid: {error}") from None


@dataclass
class RawRequest:
    """The WIT ``request`` record: objects as JSON text, children grouped by
    kind, each with its readiness."""

    object: str
    children: list[tuple[Gvk, list[tuple[str, Readiness]]]] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    finalizing: bool = False
    attempt: int = 0
    now: str = EPOCH


class Request(Generic[T]):
    """One call of ``reconcile``: the parent (typed as the reconciler declares), its
    existing children and related objects as the host's cache has them.

    Attributes:
        object: the parent, as the reconciler's ``object_type`` (a dict by
            default), including its current ``status``.
        raw: the parent as a dict, always.
        metadata: the parent's :class:`Metadata`.
        finalizing: the parent still carries the manifest's finalizer and
            is being deleted or no longer matches the Reconciler's selector:
            clean up, then answer ``finalized``.
        attempt: how many times in a row this parent failed before this call.
        now: the host's clock when the reconcile began, as it gave it (RFC
            3339 in UTC with milliseconds, ``2026-11-26T04:05:06.789Z``): one
            value for the whole call. Read the time here, never from the
            clock, so the outcome is a function of the request (and fixtures
            can fix it); :attr:`now_time` is the same as a ``datetime``.
    """

    def __init__(
        self,
        object: T,
        raw: dict,
        children: list[tuple[Gvk, list[tuple[dict, Readiness]]]] | None = None,
        related: list[dict] | None = None,
        finalizing: bool = False,
        attempt: int = 0,
        now: str = EPOCH,
    ) -> None:
        self.object = object
        self.raw = raw
        self.metadata = Metadata.of(raw)
        self.finalizing = finalizing
        self.attempt = attempt
        self.now = now
        self._children = children or []
        self._related = related or []

    @staticmethod
    def from_raw(raw: RawRequest, object_type: Any = None) -> Request[Any]:
        """Parse the WIT request, the parent as ``object_type``.

        Raises:
            Terminal: the parent is not a JSON object or does not fit
                ``object_type`` (``WebApp shop/web is invalid: missing field `image```).
        """
        try:
            parent = json.loads(raw.object)
        except ValueError as error:
            raise Terminal(f"the parent is not a Kubernetes object: {error}") from None
        if not isinstance(parent, dict):
            raise Terminal("the parent is not a Kubernetes object: not a JSON object")
        return Request(
            object=parse_object(object_type, parent),
            raw=parent,
            children=[(kind, [(json.loads(o), r) for o, r in objects]) for kind, objects in raw.children],
            related=[json.loads(o) for o in raw.related],
            finalizing=raw.finalizing,
            attempt=raw.attempt,
            now=raw.now,
        )

    @property
    def now_time(self) -> datetime:
        """:attr:`now` as an aware ``datetime`` (UTC).

        Raises:
            ValueError: ``now`` is not an RFC 3339 time (the host always gives one).
        """
        return parse_time(self.now)

    @property
    def name(self) -> str:
        """The parent's name."""
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        """The parent's namespace (None for a cluster-scoped parent)."""
        return self.metadata.namespace

    @property
    def generation(self) -> int:
        """The parent's ``metadata.generation`` (0 if it has none)."""
        return self.metadata.generation or 0

    @property
    def uid(self) -> str:
        """The parent's ``metadata.uid``."""
        return self.metadata.uid

    @property
    def kind(self) -> Gvk:
        """The parent's kind."""
        return Gvk.from_api_version(str(self.raw.get("apiVersion", "")), str(self.raw.get("kind", "")))

    def children(self, kind: Gvk, as_type: Any = None) -> list[Any]:
        """The existing children of ``kind`` (sorted by namespace, then name), as
        dicts or read as ``as_type``. Empty when none exist or the kind is not owned.

        Raises:
            Terminal: a child does not fit ``as_type``.
        """
        for group, objects in self._children:
            if group == kind:
                return [parse_object(as_type, o) for o, _ in objects]
        return []

    def child(self, kind: Gvk, name: str, as_type: Any = None) -> Any | None:
        """The existing child of ``kind`` called ``name``, or None.

        Raises:
            Terminal: that child does not fit ``as_type``.
        """
        for group, objects in self._children:
            if group == kind:
                for obj, _ in objects:
                    if Metadata.of(obj).name == name:
                        return parse_object(as_type, obj)
        return None

    def has_child(self, kind: Gvk, name: str) -> bool:
        """Whether a child of ``kind`` called ``name`` exists."""
        return self.readiness(kind, name) is not None

    def readiness(self, kind: Gvk, name: str) -> Readiness | None:
        """The readiness the host gave the child of ``kind`` called ``name``
        (kstatus's verdict), or None when there is no such child."""
        for group, objects in self._children:
            if group == kind:
                for obj, readiness in objects:
                    if Metadata.of(obj).name == name:
                        return readiness
        return None

    def rated_children(self, kind: Gvk, as_type: Any = None) -> list[tuple[Any, Readiness]]:
        """The existing children of ``kind``, each with its readiness, as
        :meth:`children` reads them.

        Raises:
            Terminal: a child does not fit ``as_type``.
        """
        for group, objects in self._children:
            if group == kind:
                return [(parse_object(as_type, o), r) for o, r in objects]
        return []

    def all_children_current(self) -> bool:
        """Whether every existing child (of every owned kind) is current: "ready
        when its children are", with no readiness rules in the reconciler. True
        when there are no children: check the ones you want exist."""
        return all(r.is_current for _, objects in self._children for _, r in objects)

    def related(self, kind: Gvk, as_type: Any = None) -> list[Any]:
        """The related objects (of watched kinds) of ``kind``.

        Raises:
            Terminal: one of them does not fit ``as_type``.
        """
        return [parse_object(as_type, o) for o in self._related if kind.matches(o)]

    @property
    def all_related(self) -> list[dict]:
        """Every related object, in the host's order."""
        return list(self._related)
