"""Run reconcilers natively, with no wasm and no cluster (for pytest).

:func:`reconcile` goes through :func:`operon_sdk.run.reconcile`, the function
the component's export calls, with a :class:`FakeCluster` standing in for the
host's cache: what passes here passes in the component. Every outcome is also
checked as the host checks it before writing anything (:func:`check_outcome`:
owned kinds, namespaces, names, sizes, ownership of the cluster's objects, as
``operon test`` does); an outcome the host would refuse raises
:class:`Refused`, naming the rule.

Requests carry ``now`` (the Unix epoch unless a test sets it, as fixtures
do) and each child's readiness. Readiness is never computed here: a test may
state it per child (``readiness={("Deployment", "web"): Readiness(...)}``);
otherwise the children of a request are rated, in one call, by the operon
binary (``$OPERON``, else ``operon`` on ``PATH``: ``operon readiness``, the
host's own rules). Without the binary they are ``unknown``, saying so.

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

Calls out (``ctx.http``, contract 0.2's ``egress``) never reach the network:
the fake host answers them from recorded exchanges, as fixtures hold them
(``FakeCluster(egress=[...])``, a fixture's ``egress:``), with the rule of
every Operon runner (:class:`Replay`). A call the recording does not hold is
answered ``notRecorded`` and fails the test (:class:`Unrecorded`), whatever
the reconciler made of the error.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from . import run
from .admission import Denied, Operation, RawReview, UserInfo
from .context import HostError, Level
from .conversion import ConversionError
from .egress import KINDS, HttpError, HttpRequest, HttpResponse, describe
from .failure import Failure, Terminal
from .kinds import Gvk
from .outcome import Event, ParentMetadata
from .readiness import EPOCH, Readiness, ReadinessStatus, format_time, from_kstatus, parse_time
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


# --- egress: recorded exchanges and their replay ---------------------------------------------


@dataclass
class Exchange:
    """One call and what came of it, as a fixture's ``egress:`` holds it:
    ``request`` and either ``response`` or ``error``.

    >>> e = Exchange.parse({"request": {"method": "GET", "url": "https://a.example/x"},
    ...                     "error": {"timeout": "no answer in 10s"}})
    >>> e.error
    HttpError('timeout', 'no answer in 10s')
    """

    request: HttpRequest
    response: HttpResponse | None = None
    error: HttpError | None = None

    def answer(self) -> HttpResponse:
        """What the recording answers (a copy).

        Raises:
            HttpError: the recorded error.
        """
        if self.error is not None:
            raise HttpError(self.error.kind, self.error.message)
        if self.response is None:
            raise HttpError("notRecorded", "the recorded exchange has neither response nor error")
        return HttpResponse(self.response.status, list(self.response.headers), self.response.body)

    @staticmethod
    def parse(value: Any, where: str = "egress[0]") -> Exchange:
        """An exchange as fixtures write it (the format of
        ``operon_contract::egress``): a request ``{method, url, headers: {name:
        value}, body, credential, timeoutMs}``, and a ``response: {status,
        headers, body}`` or an ``error: {KIND: message}`` (kinds
        ``denied``, ``invalid``, ``timeout``, ``unreachable``, ``tooLarge``,
        ``budget``, ``notRecorded``). A body is text (sent as UTF-8) or
        ``{base64: ...}``.

        Raises:
            ValueError: not of that shape, naming where.
        """
        if isinstance(value, Exchange):
            return value
        fields = _fields(value, where, {"request", "response", "error"}, {"request"})
        request_fields = _fields(
            fields["request"], f"{where}.request", {"method", "url", "headers", "body", "credential", "timeoutMs"},
            {"method", "url"},
        )
        timeout = request_fields.get("timeoutMs")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            raise ValueError(f"{where}.request.timeoutMs: {timeout!r} is not a number of milliseconds")
        credential = request_fields.get("credential")
        request = HttpRequest(
            method=_string(request_fields["method"], f"{where}.request.method"),
            url=_string(request_fields["url"], f"{where}.request.url"),
            headers=_headers(request_fields.get("headers"), f"{where}.request.headers"),
            body=None if request_fields.get("body") is None else _body(request_fields["body"], f"{where}.request.body"),
            credential=None if credential is None else _string(credential, f"{where}.request.credential"),
            timeout_ms=timeout,
        )
        response = None
        if fields.get("response") is not None:
            answer = _fields(fields["response"], f"{where}.response", {"status", "headers", "body"}, {"status"})
            status = answer["status"]
            if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 65535:
                raise ValueError(f"{where}.response.status: {status!r} is not a status code")
            response = HttpResponse(
                status,
                _headers(answer.get("headers"), f"{where}.response.headers"),
                b"" if answer.get("body") is None else _body(answer["body"], f"{where}.response.body"),
            )
        error = None
        if fields.get("error") is not None:
            spec = fields["error"]
            if not (isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) in KINDS):
                raise ValueError(f"{where}.error: one of {', '.join(KINDS)} with a message, not {spec!r}")
            kind, message = next(iter(spec.items()))
            error = HttpError(kind, _string(message, f"{where}.error.{kind}"))
        return Exchange(request, response, error)


def _fields(value: Any, where: str, allowed: set[str], required: set[str]) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: a mapping with {sorted(allowed)}, not {value!r}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (it has {sorted(allowed)})")
    missing = sorted(required - set(value))
    if missing:
        raise ValueError(f"{where}: {', '.join(missing)} missing")
    return value


def _string(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # YAML read `ttl: 60` as a number; files mean the text
    raise ValueError(f"{where}: {value!r} is not text")


def _headers(value: Any, where: str) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ValueError(f"{where}: a mapping of names to values, not {value!r}")
    return sorted((_string(k, where), _string(v, f"{where}.{k}")) for k, v in value.items())


def _body(value: Any, where: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict):
        if set(value) != {"base64"} or not isinstance(value["base64"], str):
            raise ValueError(f"{where}: text, or {{base64: ...}} for bytes that are not UTF-8, not {value!r}")
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError) as error:
            raise ValueError(f"{where}.base64: {error}") from None
    return _string(value, where).encode()


def same_call(recorded: HttpRequest, asked: HttpRequest) -> bool:
    """Whether a recorded request answers ``asked``: the same method (without
    case), URL, body (absent is empty) and credential. Headers and the
    timeout are not compared."""
    return (
        recorded.method.upper() == asked.method.upper()
        and recorded.url == asked.url
        and (recorded.body or b"") == (asked.body or b"")
        and recorded.credential == asked.credential
    )


class Replay:
    """Answers calls from recorded exchanges with no network, as every Operon
    runner does (``operon_contract::egress::Replay``): each call takes the
    first exchange not yet used that is the :func:`same_call`; a call with
    none is answered ``notRecorded`` and remembered, so the test fails naming
    it (:meth:`verdict`). Exchanges not used are fine.

    >>> replay = Replay([Exchange.parse({"request": {"method": "GET", "url": "https://a.example/x"},
    ...                                  "response": {"status": 200, "body": "hi"}})])
    >>> replay.fetch(HttpRequest("get", "https://a.example/x")).text()
    'hi'
    >>> replay.fetch(HttpRequest("GET", "https://a.example/x"))
    Traceback (most recent call last):
    ...
    operon_sdk.egress.HttpError: notRecorded: GET https://a.example/x is not in the recording (it holds: GET https://a.example/x)
    >>> replay.verdict()
    "the guest made calls the fixture's `egress` does not hold: GET https://a.example/x"
    """

    def __init__(self, exchanges: list[Exchange] | None = None) -> None:
        self.exchanges: list[Exchange] = list(exchanges or [])
        self.used: list[bool] = [False] * len(self.exchanges)
        self.calls: list[HttpRequest] = []
        """Every call, in order."""
        self.missed: list[HttpRequest] = []
        """The calls no exchange answered, in order."""

    def fetch(self, asked: HttpRequest) -> HttpResponse:
        """The answer to one call.

        Raises:
            HttpError: the recorded error, or ``notRecorded``.
        """
        self.calls.append(asked)
        for i, exchange in enumerate(self.exchanges):
            if not self.used[i] and same_call(exchange.request, asked):
                self.used[i] = True
                return exchange.answer()
        self.missed.append(asked)
        held = "; ".join(describe(e.request) for e in self.exchanges)
        raise HttpError(
            "notRecorded",
            f"{describe(asked)} is not in the recording " + (f"(it holds: {held})" if held else "(it holds no calls)"),
        )

    def verdict(self) -> str | None:
        """Why the run fails, if a call was not recorded: one line naming each."""
        if not self.missed:
            return None
        return "the guest made calls the fixture's `egress` does not hold: " + "; ".join(
            describe(r) for r in self.missed
        )


class Unrecorded(AssertionError):
    """The reconciler made calls the recording does not hold (whatever it made
    of the ``notRecorded`` error): ``calls`` names them."""

    def __init__(self, verdict: str, calls: list[HttpRequest]) -> None:
        super().__init__(verdict)
        self.calls = calls


class FakeCluster:
    """An in-memory stand-in for the host: the objects ``ctx.get`` and
    ``ctx.list`` see, and the recorded exchanges that answer ``ctx.http``.

    A read without a namespace means the parent's namespace (as in the host)
    when it goes through :func:`reconcile`. Cluster-scoped objects (no
    ``metadata.namespace``) match any namespace. Unlike the host, the fake
    lets every kind be read: check ``manifest.reads`` yourself.

    ``egress`` is a list of :class:`Exchange` or of mappings as a fixture's
    ``egress:`` holds them; none by default, so every call is answered
    ``notRecorded``. Each :func:`reconcile` replays it from the start (as
    each fixture does); ``calls`` are the requests of the last one, headers
    and all, for a test to look at.
    """

    def __init__(
        self, objects: list[dict] | None = None, namespace: str | None = None, egress: list[Any] | None = None
    ) -> None:
        self.objects: list[dict] = list(objects or [])
        self.namespace = namespace
        self.logs: list[LogLine] = []
        self.egress: list[Exchange] = [Exchange.parse(e, f"egress[{i}]") for i, e in enumerate(egress or [])]
        self.replay = Replay(self.egress)

    def record(self, exchange: Exchange | dict) -> FakeCluster:
        """Adds a recorded exchange (an :class:`Exchange` or a fixture's mapping); returns the cluster."""
        self.egress.append(Exchange.parse(exchange, f"egress[{len(self.egress)}]"))
        self.replay = Replay(self.egress)
        return self

    @property
    def calls(self) -> list[HttpRequest]:
        """The HTTP requests made since the replay started, in order."""
        return self.replay.calls

    def fetch(self, request: HttpRequest) -> HttpResponse:
        return self.replay.fetch(request)

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


NOT_RATED = (
    "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), or pass a readiness"
)
"""The readiness message of a child no binary could rate."""


def operon_binary() -> str | None:
    """The operon binary that rates children: ``$OPERON``, else ``operon`` on ``PATH``; None without one."""
    return os.environ.get("OPERON") or shutil.which("operon")


def rate(objects: list[dict]) -> list[Readiness]:
    """The readiness the host gives each object, from one run of ``operon
    readiness`` (the host's kstatus rules); ``unknown`` (:data:`NOT_RATED`)
    for each when there is no operon binary.

    Raises:
        RuntimeError: the binary named by ``$OPERON`` cannot run, or fails.
    """
    if not objects:
        return []
    binary = operon_binary()
    if binary is None:
        return [Readiness(ReadinessStatus.UNKNOWN, NOT_RATED)] * len(objects)
    try:
        done = subprocess.run(
            [binary, "readiness", "-"], input=json.dumps(objects), capture_output=True, text=True, check=False
        )
    except OSError as error:
        raise RuntimeError(f"cannot run {binary} (from $OPERON or PATH) to rate children: {error}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{binary} readiness failed ({done.returncode}): {done.stderr.strip()}")
    verdicts = json.loads(done.stdout)
    if not isinstance(verdicts, list) or len(verdicts) != len(objects):
        raise RuntimeError(f"{binary} readiness answered {done.stdout!r} for {len(objects)} objects")
    return [from_kstatus(v) for v in verdicts]


@dataclass
class RequestBuilder:
    """A request as a test writes it: the parent and a flat list of children.

    ``now`` is an RFC 3339 time (or an aware ``datetime``), handed in as the
    host spells it (UTC, milliseconds). ``readiness`` states the readiness of
    children by ``(kind, name)``; the others are rated by :func:`rate`.
    """

    __test__ = False  # not a pytest class

    object: dict
    children: list[dict] = field(default_factory=list)
    related: list[dict] = field(default_factory=list)
    finalizing: bool = False
    attempt: int = 0
    now: str | datetime = EPOCH
    readiness: dict[tuple[str, str], Readiness] = field(default_factory=dict)

    def now_text(self) -> str:
        """``now`` as the host hands it: ``2026-01-01T09:00:00.000Z``.

        Raises:
            ValueError: ``now`` is not an RFC 3339 time.
        """
        return format_time(self.now if isinstance(self.now, datetime) else parse_time(self.now))

    def to_raw(self, manifest_owns: list[Gvk]) -> RawRequest:
        """Group the children by the owned kinds, sorted by namespace then name, as
        the host does, each with its readiness (stated, else :func:`rate`).

        Raises:
            ValueError: a child lacks apiVersion/kind or is of a kind not owned.
        """
        groups: list[tuple[Gvk, list[dict]]] = [(kind, []) for kind in manifest_owns]

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
            group.append(child)
        flat = [child for _, objs in groups for child in objs]
        verdicts: list[Readiness | None] = [
            self.readiness.get((child.get("kind"), Metadata.of(child).name)) for child in flat
        ]
        unrated = [i for i, v in enumerate(verdicts) if v is None]
        for i, verdict in zip(unrated, rate([flat[i] for i in unrated])):
            verdicts[i] = verdict
        rated = iter(verdicts)
        return RawRequest(
            object=json.dumps(self.object),
            children=[(kind, [(json.dumps(c), next(rated)) for c in objs]) for kind, objs in groups],
            related=[json.dumps(o) for o in self.related],
            finalizing=self.finalizing,
            attempt=self.attempt,
            now=self.now_text(),
        )


def request(
    parent: dict,
    children: list[dict] | None = None,
    related: list[dict] | None = None,
    finalizing: bool = False,
    attempt: int = 0,
    *,
    now: str | datetime = EPOCH,
    readiness: dict[tuple[str, str], Readiness] | None = None,
) -> RequestBuilder:
    """A request for ``parent`` with its existing ``children`` (any order, any
    owned kind), at ``now``, with the readiness of children stated by
    ``(kind, name)`` (the others are rated by the operon binary)."""
    return RequestBuilder(
        parent, list(children or []), list(related or []), finalizing, attempt, now, dict(readiness or {})
    )


@dataclass
class Reconciled:
    """An outcome as a test reads it: objects as dicts, ``status`` with
    ``observedGeneration`` as the host writes it, ``needs_finalizer`` settled."""

    desired: list[dict]
    status: dict | None
    events: list[Event]
    requeue_after_ms: int | None
    finalized: bool
    requeue_at: str | None = None
    needs_finalizer: bool = False
    parent_metadata: ParentMetadata | None = None

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


def _observed_generation(status: dict | None, parent: dict) -> dict | None:
    """``status`` as the host writes it for a 0.2 module: ``observedGeneration``
    set to the parent's generation unless the reconciler set it."""
    generation = Metadata.of(parent).generation
    if status is None or generation is None or "observedGeneration" in status:
        return status
    return {**status, "observedGeneration": generation}


def _check_calls(cluster: FakeCluster) -> None:
    verdict = cluster.replay.verdict()
    if verdict is not None:
        raise Unrecorded(verdict, list(cluster.replay.missed))


def reconcile(reconciler: Reconciler[Any], req: RequestBuilder, cluster: FakeCluster | None = None) -> Reconciled:
    """Run ``reconciler`` on ``req`` through the component's code path, its
    calls out answered by ``cluster``'s recorded exchanges (replayed from
    the start).

    Raises:
        Transient, Terminal: as the component would answer (a status it
            carries with ``observedGeneration`` as the host writes it).
        Unrecorded: the reconciler made a call the recording does not hold
            (whatever it answered).
        Refused: the host would refuse the outcome (see :func:`check_outcome`).
    """
    cluster = cluster if cluster is not None else FakeCluster()
    if cluster.namespace is None:
        cluster.namespace = Metadata.of(req.object).namespace
    manifest = run.manifest(reconciler)
    raw = req.to_raw(manifest.owns)
    cluster.replay = Replay(cluster.egress)
    try:
        out = run.reconcile(reconciler, cluster, raw)
    except Failure as failure:
        _check_calls(cluster)
        if failure.status is None:
            raise
        raise failure.with_status(_observed_generation(failure.status, req.object)) from None
    _check_calls(cluster)
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
        status=_observed_generation(None if out.status is None else json.loads(out.status), req.object),
        events=out.events,
        requeue_after_ms=out.requeue_after_ms,
        finalized=out.finalized,
        requeue_at=out.requeue_at,
        needs_finalizer=bool(out.needs_finalizer),
        parent_metadata=out.parent_metadata,
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


def convert(reconciler: Reconciler[Any], objects: list[dict], desired_api_version: str) -> list[dict]:
    """Run ``convert`` through the component's code path (raises
    :class:`~operon_sdk.ConversionError` when it refuses)."""
    texts = run.convert(reconciler, [json.dumps(o) for o in objects], desired_api_version)
    return [json.loads(t) for t in texts]


# --- fixtures -----------------------------------------------------------------------------------


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise RuntimeError("fixtures need PyYAML: pip install pyyaml") from None
    import re

    class Loader(yaml.SafeLoader):
        """YAML as operon reads it (YAML 1.2): timestamps stay text, only
        ``true``/``false`` are booleans (``on``, ``yes`` stay strings), no
        sexagesimal or underscored numbers."""

    dropped = {f"tag:yaml.org,2002:{t}" for t in ("timestamp", "bool", "int", "float")}
    Loader.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in resolvers if tag not in dropped]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    core = [
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
        (
            "tag:yaml.org,2002:float",
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
            "-+.0123456789",
        ),
    ]
    for tag, pattern, first in core:
        Loader.add_implicit_resolver(tag, re.compile(pattern), list(first))

    def integer(loader: Any, node: Any) -> int:
        text = loader.construct_scalar(node)
        return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)  # 017 is 17, not YAML 1.1's 15

    Loader.add_constructor("tag:yaml.org,2002:int", integer)
    return yaml, Loader


class _Invalid(Exception):
    """A fixture file that is not of the expected shape (not a test failure)."""


def _now(fixture: dict) -> tuple[str, datetime]:
    """The fixture's ``now`` (the epoch when absent), as the host hands it and as a time."""
    text = fixture.get("now")
    if text is None:
        return EPOCH, parse_time(EPOCH)
    try:
        time = parse_time(text)
    except ValueError:
        raise _Invalid(f"now: {text!r} is not an RFC 3339 time such as 2026-01-01T00:00:00Z") from None
    return format_time(time), time


def _requeue_after_ms(out: Reconciled, now: datetime) -> int | None:
    """The requeue ``operon test`` shows: ``requeue_at`` measured from ``now``
    (0 when past), the earlier of it and ``requeue_after``."""
    candidates = [] if out.requeue_after_ms is None else [out.requeue_after_ms]
    if out.requeue_at is not None:
        delta = parse_time(out.requeue_at) - now
        candidates.append(max(delta // timedelta(milliseconds=1), 0))
    return min(candidates, default=None)


_REQUEST_KEYS = {"object", "children", "related", "finalizing", "attempt", "cluster", "now", "egress"}


def _observed(reconciler: Reconciler[Any], fixture: Any) -> dict:
    if not isinstance(fixture, dict) or "object" not in fixture:
        raise _Invalid("not a request fixture (a mapping with `object`)")
    unknown = sorted(set(fixture) - _REQUEST_KEYS)
    if unknown:
        raise _Invalid(f"unknown keys {unknown} (a request has {sorted(_REQUEST_KEYS)})")
    now, time = _now(fixture)
    req = RequestBuilder(
        object=fixture["object"],
        children=fixture.get("children") or [],
        related=fixture.get("related") or [],
        finalizing=bool(fixture.get("finalizing", False)),
        attempt=int(fixture.get("attempt", 0)),
        now=now,
    )
    visible = [req.object, *req.children, *req.related, *(fixture.get("cluster") or [])]
    egress = fixture.get("egress") or []
    if not isinstance(egress, list):
        raise _Invalid(f"egress: a list of exchanges ({{request, response or error}}), not {egress!r}")
    try:
        exchanges = [Exchange.parse(e, f"egress[{i}]") for i, e in enumerate(egress)]
    except ValueError as error:
        raise _Invalid(str(error)) from None
    try:
        out = reconcile(reconciler, req, FakeCluster(visible, egress=exchanges))
    except (Refused, Unrecorded) as refused:
        return {"refused": str(refused)}
    except Failure as failure:
        observed: dict = {"error": {"terminal" if isinstance(failure, Terminal) else "transient": failure.message}}
        if failure.status is not None:
            observed["status"] = failure.status
        return observed
    observed = {
        "desired": out.desired,
        "status": out.status,
        "events": [{"warning": e.warning, "reason": e.reason, "message": e.message} for e in out.events],
        "requeueAfterMs": _requeue_after_ms(out, time),
        "finalized": out.finalized,
        "needsFinalizer": out.needs_finalizer,
    }
    if out.parent_metadata is not None:
        observed["parentMetadata"] = {
            "labels": out.parent_metadata.labels,
            "annotations": out.parent_metadata.annotations,
        }
    return observed


_OUTCOME_KEYS = {"desired", "status", "events", "requeueAfterMs", "finalized", "needsFinalizer", "parentMetadata"}


def _normalized(expected: Any) -> dict:
    """An expected outcome as ``operon test`` reads it: what the file leaves
    out filled in, ``needsFinalizer`` and ``parentMetadata`` only when given,
    unknown keys refused (a typo must not pass as an empty outcome)."""
    if not isinstance(expected, dict):
        raise _Invalid("not an outcome or `error:`")
    if "error" in expected:
        unknown = sorted(set(expected) - {"error", "status"})
        error = expected["error"]
        if unknown or not (
            isinstance(error, dict)
            and len(error) == 1
            and next(iter(error)) in ("transient", "terminal", "sandbox")
            and isinstance(next(iter(error.values())), str)
        ):
            raise _Invalid(f"not an `error:` ({{transient|terminal|sandbox: message}} and `status`): {expected!r}")
        out = {"error": error}
        if expected.get("status") is not None:
            out["status"] = expected["status"]
        return out
    unknown = sorted(set(expected) - _OUTCOME_KEYS)
    if unknown:
        raise _Invalid(f"unknown keys {unknown} in an outcome (it has {sorted(_OUTCOME_KEYS)})")
    out = {
        "desired": expected.get("desired") or [],
        "status": expected.get("status"),
        "events": [
            {"warning": bool(e.get("warning", False)), "reason": e["reason"], "message": e["message"]}
            for e in expected.get("events") or []
        ],
        "requeueAfterMs": expected.get("requeueAfterMs"),
        "finalized": bool(expected.get("finalized", False)),
    }
    if expected.get("needsFinalizer") is not None:
        out["needsFinalizer"] = expected["needsFinalizer"]
    meta = expected.get("parentMetadata")
    if meta is not None:
        if not isinstance(meta, dict) or set(meta) - {"labels", "annotations"}:
            raise _Invalid(f"parentMetadata has `labels` and `annotations` only: {meta!r}")
        out["parentMetadata"] = {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {}}
    return out


def _same(a: Any, b: Any) -> bool:
    """JSON equality where an integer never equals a float (as the host compares)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


_REVIEW_KEYS = {
    "operation", "object", "oldObject", "kind", "subResource", "namespace", "name", "uid", "userInfo", "dryRun"
}


def _review(file: Any) -> tuple[RawReview, list[dict]]:
    """An admission fixture's review, defaulted as ``operon test`` does."""
    if not isinstance(file, dict) or set(file) - {"review", "cluster"} or not isinstance(file.get("review"), dict):
        raise _Invalid("not an admission fixture (`review:` and optionally `cluster:`)")
    spec = file["review"]
    unknown = sorted(set(spec) - _REVIEW_KEYS)
    if unknown:
        raise _Invalid(f"unknown keys {unknown} in review")
    op = spec.get("operation") or "CREATE"
    operation = next((o for o in Operation if o.value == str(op).lower()), None)
    if operation is None:
        raise _Invalid(f"review.operation {op!r} must be CREATE, UPDATE, DELETE or CONNECT")
    obj, old = spec.get("object"), spec.get("oldObject")
    shown = obj if obj is not None else old
    meta = Metadata.of(shown) if isinstance(shown, dict) else Metadata()
    if isinstance(spec.get("kind"), dict):
        kind = Gvk(spec["kind"].get("group", ""), spec["kind"]["version"], spec["kind"]["kind"])
    elif isinstance(shown, dict) and Gvk.of(shown) is not None:
        kind = Gvk.of(shown)  # type: ignore[assignment]
    else:
        raise _Invalid("review.kind is missing and the object has no apiVersion and kind")
    user = spec.get("userInfo")
    user_info = (
        UserInfo(user.get("username", ""), user.get("uid", ""), list(user.get("groups") or []))
        if isinstance(user, dict)
        else UserInfo("fixture", "", ["system:authenticated"])
    )
    raw = RawReview(
        uid=spec.get("uid") or "00000000-0000-0000-0000-000000000000",
        operation=operation,
        kind=kind,
        sub_resource=spec.get("subResource"),
        namespace=spec.get("namespace") if spec.get("namespace") is not None else meta.namespace,
        name=spec.get("name") if spec.get("name") is not None else meta.name,
        object=None if obj is None else json.dumps(obj),
        old_object=None if old is None else json.dumps(old),
        user_info=user_info,
        dry_run=bool(spec.get("dryRun", False)),
    )
    return raw, list(file.get("cluster") or [])


def _admitted(reconciler: Reconciler[Any], file: Any) -> dict:
    """The combined answer ``operon test`` gives: ``mutate``, then ``validate`` of the mutated object."""
    raw, objects = _review(file)
    cluster = FakeCluster(objects, raw.namespace)

    def answer(warnings: list[str] | None, denied: Denied | None, patched: dict | None) -> dict:
        if denied is None:
            return {"allowed": True, "warnings": warnings, "patched": patched}
        out = {"allowed": False, "message": denied.message, "warnings": [], "patched": patched}
        if denied.code is not None:
            out["code"] = denied.code
        return out

    try:
        text = run.mutate(reconciler, cluster, raw)
    except Denied as denied:
        return answer(None, denied, None)
    patched = None if text is None else json.loads(text)
    if text is not None:
        raw = RawReview(**{**raw.__dict__, "object": text})
    try:
        return answer(run.validate(reconciler, cluster, raw), None, patched)
    except Denied as denied:
        return answer(None, denied, patched)


def _expected_answer(expected: Any) -> dict:
    if not isinstance(expected, dict):
        raise _Invalid("not an admission answer (a mapping with `allowed`, or `error`)")
    if "error" in expected:
        return expected
    if not isinstance(expected.get("allowed"), bool):
        raise _Invalid("not an admission answer: `allowed: true|false` (or `error`) is missing")
    return {"warnings": [], "patched": None, **expected}


def _converted(reconciler: Reconciler[Any], file: Any) -> dict:
    if (
        not isinstance(file, dict)
        or set(file) != {"desiredAPIVersion", "objects"}
        or not isinstance(file["desiredAPIVersion"], str)
        or not isinstance(file["objects"], list)
    ):
        raise _Invalid("not a conversion fixture (`desiredAPIVersion` and `objects`)")
    try:
        return {"converted": convert(reconciler, file["objects"], file["desiredAPIVersion"])}
    except ConversionError as refused:
        return {"error": refused.message}


def _expected_conversion(expected: Any) -> dict:
    if not (isinstance(expected, dict) and len(expected) == 1 and ("converted" in expected or "error" in expected)):
        raise _Invalid("not a conversion answer: `converted: [objects]` or `error: message`")
    return expected


def _cases(directory: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    """The request (or review) files in ``directory`` sorted by name, then
    those of each subdirectory (sorted; hidden ones and ``skip`` left out),
    as ``operon test`` finds them: a fixture is never skipped for where it is."""
    if not directory.is_dir():
        return []
    files = sorted(
        p for p in directory.iterdir()
        if p.suffix in (".yaml", ".yml", ".json") and ".expected." not in p.name and p.is_file()
    )
    subdirs = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in skip)
    for sub in subdirs:
        files.extend(_cases(sub))
    return files


def check_fixtures(reconciler: Reconciler[Any], directory: str | Path) -> int:
    """Run every fixture of ``operon test`` in ``directory`` natively, as
    ``operon test`` runs them through the component: ``NAME.yaml`` with
    ``NAME.expected.yaml`` (requests at the fixture's ``now``, children rated
    by the operon binary, see :func:`rate`, calls out answered from the
    fixture's ``egress:`` by :class:`Replay`: a call it does not hold fails
    the fixture), ``admission/`` reviews and ``conversion/`` cases; every other
    subdirectory holds more requests, named by their path
    (``recorded/live-create``). Returns how many passed.

    Raises:
        AssertionError: naming every fixture whose outcome differs, with both.
    """
    yaml, loader = _yaml()
    directory = Path(directory)
    kinds = [
        ("", _observed, _normalized),
        ("admission/", _admitted, _expected_answer),
        ("conversion/", _converted, _expected_conversion),
    ]
    skip = ("admission", "conversion")
    cases = [
        (prefix, path, run_case, expect)
        for prefix, run_case, expect in kinds
        for path in _cases(directory / prefix, skip if not prefix else ())
    ]
    if not cases:
        raise AssertionError(f"{directory}: no fixtures")
    failures = []
    for prefix, path, run_case, expect in cases:
        relative = path.relative_to(directory / prefix)
        name = prefix + (relative.parent / relative.stem).as_posix()

        expected_path = next(
            (q for ext in ("yaml", "yml", "json") if (q := path.with_name(f"{path.stem}.expected.{ext}")).exists()),
            None,
        )
        if expected_path is None:
            failures.append(f"{name}: no expected file")
            continue
        try:
            observed = run_case(reconciler, yaml.load(path.read_text(), Loader=loader))
            if "refused" in observed:
                failures.append(f"{name}: {observed['refused']}")
                continue
            expected = expect(yaml.load(expected_path.read_text(), Loader=loader))
        except _Invalid as invalid:
            failures.append(f"{name}: {invalid}")
            continue
        if not _same(observed, expected):
            failures.append(
                f"{name}:\n  expected: {json.dumps(expected, sort_keys=True)}\n"
                f"  actual:   {json.dumps(observed, sort_keys=True)}"
            )
    if failures:
        raise AssertionError(f"{len(failures)} of {len(cases)} fixtures differ:\n" + "\n".join(failures))
    return len(cases)


__all__ = [
    "Exchange",
    "FakeCluster",
    "LogLine",
    "NOT_RATED",
    "Reconciled",
    "Refused",
    "Replay",
    "RequestBuilder",
    "Unrecorded",
    "check_fixtures",
    "check_outcome",
    "convert",
    "mutate",
    "operon_binary",
    "rate",
    "reconcile",
    "request",
    "review",
    "same_call",
    "validate",
]
