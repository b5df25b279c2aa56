"""What a reconciler reconciles, owns, watches and reads: :class:`Manifest`."""

from __future__ import annotations

from dataclasses import dataclass, field

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


Mapping = Label | Annotation | AllInNamespace
"""How a change of a watched object finds the parent to reconcile."""


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
        finalizer: when set, the host adds it to every parent and calls
            ``reconcile`` with ``request.finalizing`` when the parent is
            deleted, until the outcome is ``finalized``.
    """

    name: str
    for_kind: Gvk
    owns: list[Gvk] = field(default_factory=list)
    watches: list[Watch] = field(default_factory=list)
    reads: list[Gvk] = field(default_factory=list)
    finalizer: str | None = None
