"""What a reconciler reconciles, owns, watches and reads: :class:`Manifest`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from .kinds import Gvk


@dataclass(frozen=True)
class Label:
    """The watched object's label ``name`` holds the parent's name (same namespace)."""

    name: str


@dataclass(frozen=True)
class Annotation:
    """The watched object's annotation ``name`` holds ``namespace/name`` (or ``name``) of the parent."""

    name: str


@dataclass(frozen=True)
class AllInNamespace:
    """Every parent in the watched object's namespace is reconciled (a fan-out)."""


@dataclass(frozen=True)
class Reference:
    """The parent's field at the dotted ``path`` (``spec.configRef``) names the
    watched object: ``name`` (the parent's namespace) or ``namespace/name``.
    An event on it reconciles exactly the parents naming it, and it arrives in
    ``request.related``."""

    path: str


@dataclass(frozen=True)
class Selector:
    """The parent's field at the dotted ``path`` (``spec.selector``) is a label
    selector over the watched kind in the parent's namespace (a
    ``LabelSelector`` or a plain label map). A change reconciles the parents
    whose selector matched the object before or after it; the matching objects
    arrive in ``request.related``. A missing or empty selector selects nothing."""

    path: str


Mapping = Label | Annotation | AllInNamespace | Reference | Selector
"""How a change of a watched object finds the parent to reconcile."""


class UpdateStrategy(Enum):
    """How the host changes an existing child of one owned kind whose desired form changed."""

    IN_PLACE = "in-place"
    """Server-side apply over it (the default)."""
    RECREATE = "recreate"
    """Server-side apply; when the API server refuses because a field is
    immutable (a Job's template, a StatefulSet's selector), delete the child
    and create it anew on the next reconcile."""
    ON_DELETE = "on-delete"
    """Leave existing children alone; only missing ones are created."""


@dataclass(frozen=True)
class Watch:
    """A kind the reconciler does not own whose changes reconcile a parent."""

    kind: Gvk
    mapping: Mapping


@dataclass
class Manifest:
    """Describes a reconciler to the host, which reads it once when it loads the module.

    >>> from operon_sdk.kinds import DEPLOYMENT, SERVICE
    >>> m = Manifest("webapp", Gvk("example.operon.dev", "v1alpha1", "WebApp"),
    ...              owns=[DEPLOYMENT, SERVICE], finalizer="example.operon.dev/cleanup")
    >>> m.owns[0].kind
    'Deployment'

    Attributes:
        name: controller name, lowercase ``[a-z0-9-]``: the field manager is
            ``operon/<name>``; metrics and events use it too.
        for_kind: the parent kind.
        owns: kinds of children; returning any other kind from ``reconcile``
            is refused and nothing is written. Existing children reach
            ``request.children`` in this order.
        watches: other kinds whose changes reconcile a parent; the mapped
            objects arrive in ``request.related``.
        reads: kinds the reconciler reads with ``ctx.get`` and ``ctx.list``.
        finalizer: when set, the host adds it to the parents whose outcome
            says ``needs_finalizer`` and calls ``reconcile`` with
            ``request.finalizing`` when such a parent is deleted or leaves
            the Reconciler's selector, until the outcome is ``finalized``. With a finalizer, an outcome needs it
            unless it says otherwise (:meth:`Outcome.needs_finalizer`), so
            every parent carries it, as before contract 0.2.
        updates: the :class:`UpdateStrategy` of owned kinds; a kind not
            listed is updated in place.
    """

    name: str
    for_kind: Gvk
    owns: list[Gvk] = field(default_factory=list)
    watches: list[Watch] = field(default_factory=list)
    reads: list[Gvk] = field(default_factory=list)
    finalizer: str | None = None
    updates: dict[Gvk, UpdateStrategy] = field(default_factory=dict)
