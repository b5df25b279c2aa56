"""Run reconcilers natively, with no wasm and no cluster (for pytest).

:func:`reconcile` goes through :func:`operon_sdk.run.reconcile`, the function
the component's export calls, with a :class:`FakeCluster` standing in for the
host's cache: what passes here passes in the component.

>>> from operon_sdk import Gvk, Manifest, Outcome, Reconciler
>>> class Mirror(Reconciler[dict]):
...     def manifest(self):
...         return Manifest("mirror", Gvk("", "v1", "ConfigMap"), reads=[Gvk("", "v1", "Secret")])
...     def reconcile(self, request, ctx):
...         secrets = ctx.list(Gvk("", "v1", "Secret"), "team=web")
...         return Outcome().set_status({"secrets": len(secrets)})
>>> secret = lambda ns: {"apiVersion": "v1", "kind": "Secret",
...                      "metadata": {"name": "s", "namespace": ns, "labels": {"team": "web"}}}
>>> cluster = FakeCluster([secret("shop"), secret("other")])
>>> parent = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "shop"}}
>>> reconcile(Mirror(), request(parent), cluster).status
{'secrets': 1}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import run
from .admission import Operation, RawReview, UserInfo
from .context import HostError, Level
from .failure import Failure, Terminal
from .kinds import Gvk
from .outcome import Event
from .reconciler import Reconciler
from .request import Metadata, RawRequest
from .selector import Selector, SelectorError


@dataclass
class LogLine:
    """A line logged through ``ctx.log``."""

    level: Level
    message: str
    fields: list[tuple[str, str]]


class FakeCluster:
    """An in-memory stand-in for the host's cache: the objects ``ctx.get`` and
    ``ctx.list`` see.

    A read without a namespace means the parent's namespace (as in the host)
    when it goes through :func:`reconcile`. Cluster-scoped objects (no
    ``metadata.namespace``) match any namespace. Unlike the host, the fake
    lets every kind be read: check ``manifest.reads`` yourself.
    """

    def __init__(self, objects: list[dict] | None = None, namespace: str | None = None) -> None:
        self.objects: list[dict] = list(objects or [])
        self.namespace = namespace
        self.logs: list[LogLine] = []

    def add(self, obj: dict) -> FakeCluster:
        """Adds an object; returns the cluster."""
        self.objects.append(obj)
        return self

    def _in_scope(self, kind: Gvk, namespace: str | None) -> list[dict]:
        namespace = namespace if namespace is not None else self.namespace
        out = []
        for obj in self.objects:
            obj_ns = Metadata.of(obj).namespace
            if kind.matches(obj) and (obj_ns is None or namespace is None or obj_ns == namespace):
                out.append(obj)
        return out

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        self.logs.append(LogLine(level, message, fields))

    def get(self, kind: Gvk, namespace: str | None, name: str) -> str | None:
        for obj in self._in_scope(kind, namespace):
            if Metadata.of(obj).name == name:
                return json.dumps(obj)
        return None

    def list(self, kind: Gvk, namespace: str | None, label_selector: str | None) -> list[str]:
        try:
            selector = Selector.parse(label_selector)
        except SelectorError as error:
            raise HostError(str(error)) from None
        return [json.dumps(o) for o in self._in_scope(kind, namespace) if selector.matches(Metadata.of(o).labels)]


@dataclass
class RequestBuilder:
    """A request as a test writes it: the parent and a flat list of children."""

    __test__ = False  # not a pytest class

    object: dict
    children: list[dict] = field(default_factory=list)
    related: list[dict] = field(default_factory=list)
    finalizing: bool = False
    attempt: int = 0

    def to_raw(self, manifest_owns: list[Gvk]) -> RawRequest:
        """Group the children by the owned kinds, sorted by namespace then name, as the host does.

        Raises:
            ValueError: a child lacks apiVersion/kind or is of a kind not owned.
        """
        groups: list[tuple[Gvk, list[str]]] = [(kind, []) for kind in manifest_owns]

        def order(obj: dict) -> tuple[str, str]:
            meta = Metadata.of(obj)
            return (meta.namespace or "", meta.name)

        for i, child in enumerate(sorted(self.children, key=order)):
            kind = Gvk.of(child)
            if kind is None:
                raise ValueError(f"children[{i}] lacks apiVersion or kind")
            group = next((objs for k, objs in groups if k == kind), None)
            if group is None:
                raise ValueError(f"children[{i}] is a {kind}, which the reconciler does not own")
            group.append(json.dumps(child))
        return RawRequest(
            object=json.dumps(self.object),
            children=groups,
            related=[json.dumps(o) for o in self.related],
            finalizing=self.finalizing,
            attempt=self.attempt,
        )


def request(
    parent: dict,
    children: list[dict] | None = None,
    related: list[dict] | None = None,
    finalizing: bool = False,
    attempt: int = 0,
) -> RequestBuilder:
    """A request for ``parent`` with its existing ``children`` (any order, any owned kind)."""
    return RequestBuilder(parent, list(children or []), list(related or []), finalizing, attempt)


@dataclass
class Reconciled:
    """An outcome as a test reads it: objects as dicts."""

    desired: list[dict]
    status: dict | None
    events: list[Event]
    requeue_after_ms: int | None
    finalized: bool

    def find(self, kind: str, name: str) -> dict | None:
        """The desired object of ``kind`` (e.g. ``Deployment``) called ``name``."""
        return next(
            (o for o in self.desired if o.get("kind") == kind and Metadata.of(o).name == name),
            None,
        )

    @property
    def reasons(self) -> list[str]:
        """The events' reasons, in order."""
        return [e.reason for e in self.events]


def reconcile(reconciler: Reconciler[Any], req: RequestBuilder, cluster: FakeCluster | None = None) -> Reconciled:
    """Run ``reconciler`` on ``req`` through the component's code path.

    Raises:
        Transient, Terminal: as the component would answer.
    """
    cluster = cluster or FakeCluster()
    if cluster.namespace is None:
        cluster.namespace = Metadata.of(req.object).namespace
    raw = req.to_raw(run.manifest(reconciler).owns)
    out = run.reconcile(reconciler, cluster, raw)
    return Reconciled(
        desired=[json.loads(o) for o in out.desired],
        status=None if out.status is None else json.loads(out.status),
        events=out.events,
        requeue_after_ms=out.requeue_after_ms,
        finalized=out.finalized,
    )


def review(
    operation: str | Operation,
    obj: dict | None = None,
    old_object: dict | None = None,
    *,
    dry_run: bool = False,
    username: str = "tester",
) -> RawReview:
    """An admission review of ``obj`` (its kind, namespace and name read from it)."""
    operation = Operation(operation) if isinstance(operation, str) else operation
    source = obj if obj is not None else old_object or {}
    meta = Metadata.of(source)
    return RawReview(
        uid="00000000-0000-0000-0000-000000000000",
        operation=operation,
        kind=Gvk.of(source) or Gvk("", "", ""),
        sub_resource=None,
        namespace=meta.namespace,
        name=meta.name,
        object=None if obj is None else json.dumps(obj),
        old_object=None if old_object is None else json.dumps(old_object),
        user_info=UserInfo(username, "", ["system:authenticated"]),
        dry_run=dry_run,
    )


def validate(reconciler: Reconciler[Any], raw: RawReview, cluster: FakeCluster | None = None) -> list[str]:
    """Run ``validate`` through the component's code path (raises :class:`~operon_sdk.Denied`)."""
    return run.validate(reconciler, cluster or FakeCluster(), raw)


def mutate(reconciler: Reconciler[Any], raw: RawReview, cluster: FakeCluster | None = None) -> dict | None:
    """Run ``mutate`` through the component's code path (raises :class:`~operon_sdk.Denied`)."""
    text = run.mutate(reconciler, cluster or FakeCluster(), raw)
    return None if text is None else json.loads(text)


# --- fixtures -----------------------------------------------------------------------------------


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise RuntimeError("fixtures need PyYAML: pip install pyyaml") from None

    class Loader(yaml.SafeLoader):
        """YAML as serde_yaml reads it: timestamps stay text."""

    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return yaml, Loader


def _observed(reconciler: Reconciler[Any], fixture: dict) -> dict:
    req = RequestBuilder(
        object=fixture["object"],
        children=fixture.get("children") or [],
        related=fixture.get("related") or [],
        finalizing=bool(fixture.get("finalizing", False)),
        attempt=int(fixture.get("attempt", 0)),
    )
    visible = [req.object, *req.children, *req.related, *(fixture.get("cluster") or [])]
    try:
        out = reconcile(reconciler, req, FakeCluster(visible))
    except Failure as failure:
        return {"error": {"terminal" if isinstance(failure, Terminal) else "transient": failure.message}}
    return {
        "desired": out.desired,
        "status": out.status,
        "events": [{"warning": e.warning, "reason": e.reason, "message": e.message} for e in out.events],
        "requeueAfterMs": out.requeue_after_ms,
        "finalized": out.finalized,
    }


def _normalized(expected: dict) -> dict:
    if "error" in expected:
        return expected
    return {
        "desired": expected.get("desired") or [],
        "status": expected.get("status"),
        "events": [
            {"warning": bool(e.get("warning", False)), "reason": e["reason"], "message": e["message"]}
            for e in expected.get("events") or []
        ],
        "requeueAfterMs": expected.get("requeueAfterMs"),
        "finalized": bool(expected.get("finalized", False)),
    }


def _same(a: Any, b: Any) -> bool:
    """JSON equality where an integer never equals a float (as the host compares)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def check_fixtures(reconciler: Reconciler[Any], directory: str | Path) -> int:
    """Run every fixture of ``operon test`` in ``directory`` (``NAME.yaml`` with
    ``NAME.expected.yaml``) natively; returns how many passed.

    Raises:
        AssertionError: naming every fixture whose outcome differs, with both.
    """
    yaml, loader = _yaml()
    directory = Path(directory)
    fixtures = sorted(
        p for p in directory.iterdir()
        if p.suffix in (".yaml", ".yml", ".json") and ".expected." not in p.name and p.is_file()
    )
    if not fixtures:
        raise AssertionError(f"{directory}: no fixtures")
    failures = []
    for path in fixtures:
        expected_path = next(
            (q for ext in ("yaml", "yml", "json") if (q := path.with_name(f"{path.stem}.expected.{ext}")).exists()),
            None,
        )
        if expected_path is None:
            failures.append(f"{path.stem}: no expected file")
            continue
        observed = _observed(reconciler, yaml.load(path.read_text(), Loader=loader))
        expected = _normalized(yaml.load(expected_path.read_text(), Loader=loader))
        if not _same(observed, expected):
            failures.append(
                f"{path.stem}:\n  expected: {json.dumps(expected, sort_keys=True)}\n"
                f"  actual:   {json.dumps(observed, sort_keys=True)}"
            )
    if failures:
        raise AssertionError(f"{len(failures)} of {len(fixtures)} fixtures differ:\n" + "\n".join(failures))
    return len(fixtures)


__all__ = [
    "FakeCluster",
    "LogLine",
    "Reconciled",
    "RequestBuilder",
    "check_fixtures",
    "mutate",
    "reconcile",
    "request",
    "review",
    "validate",
]
