"""Run reconcilers natively, with no wasm and no cluster (for pytest).

:func:`reconcile` goes through :func:`operon_sdk.run.reconcile`, the function
the component's export calls, with a :class:`FakeCluster` standing in for the
host's cache: what passes here passes in the component. Every outcome is also
checked as the host checks it before writing anything (:func:`check_outcome`:
owned kinds, namespaces, names, sizes, ownership of the cluster's objects, as
``operon test`` does); an outcome the host would refuse raises
:class:`Refused`, naming the rule.

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
from ._rules import RULES


class Refused(AssertionError):
    """The host would refuse this outcome before writing anything; ``message``
    names the object and the rule, as ``operon test`` says it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"outcome refused, nothing written: {message} (the host checks this before writing)")
        self.message = message


def _kind_matches(rule: dict, kind: Gvk) -> bool:
    return rule["group"] == kind.group and rule.get("kind") in (None, kind.kind)


def _valid_name(name: str) -> bool:
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
    return (
        0 < len(name.encode()) <= RULES["maxNameBytes"]
        and all(c in allowed for c in name)
        and name[0].isalnum()
        and name[-1].isalnum()
    )


def check_outcome(
    manifest_name: str,
    owns: list[Gvk],
    parent: dict,
    children: list[dict],
    cluster: list[dict],
    desired: list[dict],
    reasons: list[str],
) -> None:
    """The host's checks of an outcome before it writes anything, with the policy
    of ``operon run --module`` (what the manifest owns, any namespace,
    cluster-scoped kinds allowed, no adoption): the rules and messages of
    ``operon_contract::rules`` (``contract/rules/``). ``children`` are the
    parent's own; ``cluster`` the other objects a child could be written over.

    Raises:
        Refused: naming the object and the rule.
    """
    if len(desired) > RULES["maxDesired"]:
        raise Refused(
            f"{len(desired)} desired objects exceed the limit of {RULES['maxDesired']} per outcome "
            "(the host's --max-children-per-outcome)"
        )
    if len(reasons) > RULES["maxEvents"]:
        raise Refused(
            f"{len(reasons)} events exceed the limit of {RULES['maxEvents']} per outcome "
            "(the host's --max-events-per-outcome)"
        )
    owned = ", ".join(str(k) for k in owns) or "none"
    parent_meta = parent.get("metadata") or {}
    parent_ns = parent_meta.get("namespace")
    uid = parent_meta.get("uid")
    owner = {
        "apiVersion": parent.get("apiVersion"),
        "kind": parent.get("kind"),
        "name": parent_meta.get("name"),
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    seen: set[tuple[Gvk, str | None, str]] = set()
    checked: list[tuple[Gvk, str | None, str]] = []
    for i, obj in enumerate(desired):
        kind = Gvk.of(obj)
        if kind is None:
            raise Refused(f"desired[{i}] lacks apiVersion or kind")
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name") if isinstance(meta.get("name"), str) else ""
        what = f"desired[{i}] ({kind} {name})"
        reserved = next((r for r in RULES["reserved"] if _kind_matches(r, kind)), None)
        if reserved is not None:
            raise Refused(f"{what}: {kind} may never be written by a plugin ({reserved['why']})")
        if kind not in owns:
            raise Refused(f"{what}: kind {kind} is not among the kinds {manifest_name} may write ({owned})")
        if not _valid_name(name):
            raise Refused(
                f"{what}: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)"
            )
        cluster_scoped = any(_kind_matches(r, kind) for r in RULES["clusterScoped"])
        child_ns = meta.get("namespace")
        if not cluster_scoped and parent_ns is not None:
            if child_ns is not None and child_ns != parent_ns:
                raise Refused(
                    f'{what}: namespace "{child_ns}" differs from the parent\'s "{parent_ns}"; '
                    "children live in their parent's namespace"
                )
            ns = parent_ns
        elif not cluster_scoped:
            if child_ns is None:
                raise Refused(f"{what}: a namespaced child of a cluster-scoped parent needs metadata.namespace")
            ns = child_ns
        elif parent_ns is not None:
            raise Refused(f"{what}: {kind} is cluster-scoped and cannot be owned by a namespaced parent")
        else:
            ns = None
        if (kind, ns, name) in seen:
            raise Refused(f"{what}: returned twice")
        seen.add((kind, ns, name))
        prepared = json.loads(json.dumps(obj))
        prepared_meta = prepared.setdefault("metadata", {})
        for field_name in (
            "resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"
        ):
            prepared_meta.pop(field_name, None)
        if ns is not None:
            prepared_meta["namespace"] = ns
        prepared_meta["ownerReferences"] = [owner]
        size = len(json.dumps(prepared, separators=(",", ":"), ensure_ascii=False).encode())
        if size > RULES["maxObjectBytes"]:
            raise Refused(f"{what}: {size} bytes exceeds the {RULES['maxObjectBytes']}-byte object limit")
        checked.append((kind, ns, name))
    for i, reason in enumerate(reasons):
        if not reason or len(reason.encode()) > RULES["maxReasonBytes"]:
            raise Refused(f"events[{i}]: reason must be 1-{RULES['maxReasonBytes']} characters")

    def same(obj: dict, kind: Gvk, ns: str | None, name: str) -> bool:
        meta = Metadata.of(obj)
        return Gvk.of(obj) == kind and meta.name == name and (meta.namespace is None or meta.namespace == ns)

    for kind, ns, name in checked:
        if any(same(c, kind, ns, name) for c in children):
            continue
        existing = next((o for o in cluster if same(o, kind, ns, name)), None)
        if existing is None:
            continue
        at = f"{ns}/{name}" if ns is not None else name
        owners = (existing.get("metadata") or {}).get("ownerReferences") or []
        controller = next((o for o in owners if o.get("controller") is True), None)
        if controller is None:
            raise Refused(
                f"{kind.kind} {at} exists without a controller owner; adopting it needs spec.grants.adopt: true "
                "(or delete it, or rename the child)"
            )
        if controller.get("uid") != uid:
            raise Refused(
                f"{kind.kind} {at} exists and is controlled by {controller.get('kind')} {controller.get('name')}; "
                "it is never taken over (rename the child, or delete the other owner)"
            )


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
        Refused: the host would refuse the outcome (see :func:`check_outcome`).
    """
    cluster = cluster or FakeCluster()
    if cluster.namespace is None:
        cluster.namespace = Metadata.of(req.object).namespace
    manifest = run.manifest(reconciler)
    raw = req.to_raw(manifest.owns)
    out = run.reconcile(reconciler, cluster, raw)
    check_outcome(
        manifest.name,
        manifest.owns,
        req.object,
        req.children,
        cluster.objects,
        [json.loads(o) for o in out.desired],
        [e.reason for e in out.events],
    )
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
    except Refused as refused:
        return {"refused": str(refused)}
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
        if "refused" in observed:
            failures.append(f"{path.stem}: {observed['refused']}")
            continue
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
    "Refused",
    "RequestBuilder",
    "check_fixtures",
    "check_outcome",
    "mutate",
    "reconcile",
    "request",
    "review",
    "validate",
]
