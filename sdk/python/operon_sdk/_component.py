"""The component's ``guest`` exports: the only module that imports the bindings
componentize-py generates (``wit_world``), so everything else runs natively.

``operon build`` writes the entry module componentize-py starts from::

    from operon_sdk._component import Guest, bind
    from greeter import Greeter
    bind(Greeter())

(plus ``Admission`` from :mod:`operon_sdk._admission` and ``Conversion``
from :mod:`operon_sdk._conversion` for the worlds that export them).
"""

from __future__ import annotations

from typing import Any

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import egress as wit_egress
from wit_world.imports import host as wit_host
from wit_world.imports import types as wit

from . import run
from .context import HostError, Level
from .egress import HttpError, HttpRequest, HttpResponse
from .failure import Failure
from .kinds import Gvk
from .manifest import AllInNamespace, Annotation, Label, Reference, Selector, UpdateStrategy
from .outcome import _dumps
from .readiness import Readiness, ReadinessStatus
from .reconciler import Reconciler
from .request import RawRequest

_reconciler: Reconciler[Any] | None = None

_LEVELS = {
    Level.TRACE: wit_host.Level.TRACE,
    Level.DEBUG: wit_host.Level.DEBUG,
    Level.INFO: wit_host.Level.INFO,
    Level.WARN: wit_host.Level.WARN,
    Level.ERROR: wit_host.Level.ERROR,
}

_READINESS = {
    wit.ReadinessStatus.CURRENT: ReadinessStatus.CURRENT,
    wit.ReadinessStatus.IN_PROGRESS: ReadinessStatus.IN_PROGRESS,
    wit.ReadinessStatus.FAILED: ReadinessStatus.FAILED,
    wit.ReadinessStatus.TERMINATING: ReadinessStatus.TERMINATING,
    wit.ReadinessStatus.UNKNOWN: ReadinessStatus.UNKNOWN,
}

_STRATEGIES = {
    UpdateStrategy.IN_PLACE: wit.UpdateStrategy.IN_PLACE,
    UpdateStrategy.RECREATE: wit.UpdateStrategy.RECREATE,
    UpdateStrategy.ON_DELETE: wit.UpdateStrategy.ON_DELETE,
}


_HTTP_ERRORS = {
    wit_egress.HttpError_Denied: "denied",
    wit_egress.HttpError_Invalid: "invalid",
    wit_egress.HttpError_Timeout: "timeout",
    wit_egress.HttpError_Unreachable: "unreachable",
    wit_egress.HttpError_TooLarge: "tooLarge",
    wit_egress.HttpError_Budget: "budget",
    wit_egress.HttpError_NotRecorded: "notRecorded",
}


def bind(reconciler: Reconciler[Any], admission: bool = False, conversion: bool = False) -> None:
    """Make ``reconciler`` the component's. Runs while componentize-py builds
    the component, so mistakes fail the build, not the first call."""
    global _reconciler
    if not isinstance(reconciler, Reconciler):
        raise TypeError(f"{reconciler!r} is not an operon_sdk.Reconciler")
    if admission and not type(reconciler).has_admission():
        raise TypeError(
            f"operon.toml's world exports admission, but {type(reconciler).__name__} "
            "defines neither validate nor mutate"
        )
    if conversion and not type(reconciler).has_conversion():
        raise TypeError(f"operon.toml's world exports conversion, but {type(reconciler).__name__} defines no convert")
    run.manifest(reconciler)  # fails the build when it raises
    _reconciler = reconciler


def reconciler() -> Reconciler[Any]:
    """The bound reconciler."""
    if _reconciler is None:
        raise RuntimeError("no reconciler bound: the entry module must call operon_sdk._component.bind")
    return _reconciler


def _gvk(kind: Gvk) -> wit.Gvk:
    return wit.Gvk(kind.group, kind.version, kind.kind)


class WitHost:
    """:class:`~operon_sdk.context.Host` over the component's ``host`` and ``egress`` imports."""

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        wit_host.log(_LEVELS[level], message, fields)

    def get(self, kind: Gvk, namespace: str | None, name: str) -> str | None:
        try:
            return wit_host.get(wit.ObjectRef(_gvk(kind), namespace, name))
        except Err as error:
            raise HostError(str(error.value)) from None

    def list(self, kind: Gvk, namespace: str | None, label_selector: str | None) -> list[str]:
        try:
            return wit_host.list(_gvk(kind), namespace, label_selector)
        except Err as error:
            raise HostError(str(error.value)) from None

    def fetch(self, request: HttpRequest) -> HttpResponse:
        try:
            answer = wit_egress.fetch(
                wit_egress.HttpRequest(
                    method=request.method,
                    url=request.url,
                    headers=list(request.headers),
                    body=request.body,
                    credential=request.credential,
                    timeout_ms=request.timeout_ms,
                )
            )
        except Err as error:
            kind = _HTTP_ERRORS.get(type(error.value), "invalid")
            raise HttpError(kind, str(getattr(error.value, "value", error.value))) from None
        return HttpResponse(answer.status, list(answer.headers), bytes(answer.body))


HOST = WitHost()


def _mapping(mapping: Any) -> wit.Mapping:
    if isinstance(mapping, Label):
        return wit.Mapping_Label(mapping.name)
    if isinstance(mapping, Annotation):
        return wit.Mapping_Annotation(mapping.name)
    if isinstance(mapping, AllInNamespace):
        return wit.Mapping_AllInNamespace()
    if isinstance(mapping, Reference):
        return wit.Mapping_Reference(mapping.path)
    if isinstance(mapping, Selector):
        return wit.Mapping_Selector(mapping.path)
    raise TypeError(f"not a watch mapping: {mapping!r}")


class Guest(exports.Guest):
    """The ``guest`` interface."""

    def manifest(self) -> wit.ReconcilerManifest:
        m = run.manifest(reconciler())
        return wit.ReconcilerManifest(
            name=m.name,
            for_=_gvk(m.for_kind),
            owns=[_gvk(k) for k in m.owns],
            watches=[wit.Watch(_gvk(w.kind), _mapping(w.mapping)) for w in m.watches],
            reads=[_gvk(k) for k in m.reads],
            updates=[wit.OwnedUpdate(_gvk(k), _STRATEGIES[s]) for k, s in m.updates.items()],
            finalizer=m.finalizer,
        )

    def reconcile(self, request: wit.Request) -> wit.Outcome:
        raw = RawRequest(
            object=request.object,
            children=[
                (
                    Gvk(c.kind.group, c.kind.version, c.kind.kind),
                    [(o.object, Readiness(_READINESS[o.readiness.status], o.readiness.message)) for o in c.objects],
                )
                for c in request.children
            ],
            related=request.related,
            finalizing=request.finalizing,
            attempt=request.attempt,
            now=request.now,
        )
        try:
            out = run.reconcile(reconciler(), HOST, raw)
        except Failure as failure:
            variant = wit.Failure_Terminal if failure.terminal else wit.Failure_Transient
            status = None if failure.status is None else _dumps(failure.status)
            raise Err(variant(wit.FailureDetail(failure.message, status))) from None
        meta = out.parent_metadata
        return wit.Outcome(
            desired=out.desired,
            status=out.status,
            events=[wit.Event(e.warning, e.reason, e.message) for e in out.events],
            requeue_after_ms=out.requeue_after_ms,
            requeue_at=out.requeue_at,
            finalized=out.finalized,
            needs_finalizer=bool(out.needs_finalizer),
            parent_metadata=None
            if meta is None
            else wit.ParentMetadata(sorted(meta.labels.items()), sorted(meta.annotations.items())),
        )
