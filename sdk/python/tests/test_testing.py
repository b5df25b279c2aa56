"""The native path (operon_sdk.testing) behaves as the host: reads scoped to the
parent's namespace, selectors, fixtures, admission."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Greeter, greeting

from operon_sdk import (
    CONFIG_MAP,
    DEPLOYMENT,
    SECRET,
    SERVICE,
    ConversionError,
    Denied,
    Gvk,
    Manifest,
    Outcome,
    Readiness,
    ReadinessStatus,
    Reconciler,
    Terminal,
    Transient,
)
from operon_sdk.selector import Selector, SelectorError
from operon_sdk.testing import (
    NOT_RATED,
    FakeCluster,
    check_fixtures,
    convert,
    mutate,
    rate,
    reconcile,
    request,
    review,
    validate,
)


def secret(name: str, namespace: str | None, **labels: str) -> dict:
    meta = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta}


class Reader(Reconciler[dict]):
    def manifest(self) -> Manifest:
        return Manifest("reader", CONFIG_MAP, reads=[SECRET])

    def reconcile(self, request, ctx) -> Outcome:
        ctx.info("reading", parent=request.name)
        found = ctx.get(SECRET, "db")
        listed = ctx.list(SECRET, request.raw.get("data", {}).get("selector", ""))
        if found is None:
            raise Transient("secret db does not exist yet")
        return Outcome().set_status({"listed": sorted(o["metadata"]["name"] for o in listed)})


def parent(selector: str = "") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "shop"},
            "data": {"selector": selector}}


def test_reads_should_see_the_parents_namespace_and_cluster_scoped_objects():
    cluster = FakeCluster([secret("db", "shop", team="web"), secret("x", "other", team="web"), secret("g", None)])
    out = reconcile(Reader(), request(parent()), cluster)
    assert out.status == {"listed": ["db", "g"]}
    assert cluster.logs[0].message == "reading" and cluster.logs[0].fields == [("parent", "p")]


def test_selectors_should_filter_lists():
    cluster = FakeCluster([secret("db", "shop", team="web", tier="db"), secret("a", "shop", team="web")])
    assert reconcile(Reader(), request(parent("tier=db")), cluster).status == {"listed": ["db"]}
    assert reconcile(Reader(), request(parent("team in (web),!tier")), cluster).status == {"listed": ["a"]}


def test_a_malformed_selector_should_be_a_transient_failure():
    cluster = FakeCluster([secret("db", "shop")])
    with pytest.raises(Transient, match="cannot list v1 Secret: invalid label selector"):
        reconcile(Reader(), request(parent("a===b")), cluster)


def test_a_missing_object_should_be_none():
    with pytest.raises(Transient, match="does not exist yet"):
        reconcile(Reader(), request(parent()), FakeCluster())


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b)", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("a=b,c", {"a": "b"}, False),
    ],
)
def test_selector_should_follow_kubernetes(text, labels, matches):
    assert Selector.parse(text).matches(labels) is matches


def test_selector_should_refuse_garbage():
    with pytest.raises(SelectorError):
        Selector.parse("a b c")


def test_children_of_kinds_not_owned_should_be_refused(greeter):
    with pytest.raises(ValueError, match="does not own"):
        reconcile(greeter, request(greeting(), [secret("x", "default")]))


def test_the_greeter_should_publish_and_report(greeter):
    out = reconcile(greeter, request(greeting("hi", 2)))
    assert out.find("ConfigMap", "hello-greeting")["data"] == {"message": "hi"}
    assert out.status == {"observedGeneration": 2, "published": False}
    with pytest.raises(Terminal):
        reconcile(greeter, request(greeting("")))


FIXTURE = """
object:
  apiVersion: demo.operon.dev/v1alpha1
  kind: Greeting
  metadata: {name: hello, namespace: default, generation: 1, creationTimestamp: "2026-11-20T10:00:00Z"}
  spec: {message: hi}
"""

EXPECTED = """
desired:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: hello-greeting}
  data: {message: hi}
status: {observedGeneration: 1, published: false}
events: []
requeueAfterMs: null
finalized: false
needsFinalizer: false
"""


def test_check_fixtures_should_pass_matching_outcomes_and_fail_others(tmp_path: Path, greeter):
    (tmp_path / "create.yaml").write_text(FIXTURE)
    (tmp_path / "create.expected.yaml").write_text(EXPECTED)
    assert check_fixtures(greeter, tmp_path) == 1

    (tmp_path / "create.expected.yaml").write_text(EXPECTED.replace("observedGeneration: 1", "observedGeneration: 1.0"))
    with pytest.raises(AssertionError, match="1 of 1 fixtures differ"):
        check_fixtures(greeter, tmp_path)
    # An expected file of a 0.1 module (no needsFinalizer) is not this outcome.
    (tmp_path / "create.expected.yaml").write_text(EXPECTED.replace("needsFinalizer: false\n", ""))
    with pytest.raises(AssertionError, match="1 of 1 fixtures differ"):
        check_fixtures(greeter, tmp_path)
    (tmp_path / "create.expected.yaml").write_text(EXPECTED.replace("finalized:", "finalised:"))
    with pytest.raises(AssertionError, match="unknown keys"):
        check_fixtures(greeter, tmp_path)

    (tmp_path / "create.expected.yaml").write_text("error:\n  terminal: spec.message must not be empty\n")
    with pytest.raises(AssertionError, match="create"):
        check_fixtures(greeter, tmp_path)
    (tmp_path / "create.yaml").write_text(FIXTURE.replace("message: hi", "message: ''"))
    assert check_fixtures(greeter, tmp_path) == 1


class Guarded(Greeter):
    def validate(self, review, ctx):
        if review.object and review.object["spec"]["message"] == "no":
            raise Denied("say something else", code=422)
        return ["greetings are public"]

    def mutate(self, review, ctx):
        obj = review.object
        obj["spec"].setdefault("message", "hello")
        return obj


def test_admission_should_answer_warnings_denials_and_objects():
    assert validate(Guarded(), review("create", greeting("hi"))) == ["greetings are public"]
    with pytest.raises(Denied) as denied:
        validate(Guarded(), review("update", greeting("no"), greeting("hi")))
    assert denied.value == Denied("say something else", 422)
    obj = greeting()
    del obj["spec"]["message"]
    assert mutate(Guarded(), review("create", obj))["spec"]["message"] == "hello"


def test_admission_should_be_optional():
    assert not Greeter.has_admission() and Guarded.has_admission()
    assert validate(Greeter(), review("create", greeting())) == []
    assert mutate(Greeter(), review("create", greeting())) is None


def test_parent_type_should_come_from_the_type_argument():
    from conftest import Greeting

    assert Greeter.parent_type() is Greeting
    assert Reader.parent_type() is dict

    class Untyped(Reconciler):
        pass

    assert Untyped.parent_type() is None
    assert Gvk.from_api_version("v1", "Pod").api_version == "v1"


# --- contract 0.2 ---------------------------------------------------------------------------------

THING = Gvk("example.operon.dev", "v1alpha1", "Thing")


@dataclass
class ThingSpec:
    at: str | None = None
    fail: bool = False
    keep: bool | None = None


@dataclass
class Thing:
    spec: ThingSpec


class Clock(Reconciler[Thing]):
    """Reads the time and the children's readiness; converts Things."""

    def __init__(self, finalizer: str | None = "example.operon.dev/cleanup") -> None:
        self.finalizer = finalizer

    def manifest(self) -> Manifest:
        return Manifest("clock", THING, owns=[DEPLOYMENT, SERVICE], finalizer=self.finalizer)

    def reconcile(self, request, ctx) -> Outcome:
        if request.object.spec.fail:
            raise Terminal("spec.fail is set", status={"ready": False, "now": request.now})
        children = [
            f"{o['kind']} {o['metadata']['name']}={r.status.value}: {r.message}"
            for kind in (DEPLOYMENT, SERVICE)
            for o, r in request.rated_children(kind)
        ]
        out = Outcome().set_status({"now": request.now, "children": children, "ready": request.all_children_current()})
        if request.object.spec.at is not None:
            out.requeue_at(request.object.spec.at)
        if request.object.spec.keep is not None:
            out.needs_finalizer(request.object.spec.keep)
        return out

    def invalid(self, request, failure):
        return failure.with_status({"ready": False, "reason": "Invalid"})

    def convert(self, objects, desired_api_version):
        if desired_api_version not in ("example.operon.dev/v1alpha1", "example.operon.dev/v1"):
            raise ConversionError(f"cannot convert to {desired_api_version}")
        return [{**o, "apiVersion": desired_api_version} for o in objects]


def thing(generation: int = 3, **spec) -> dict:
    return {"apiVersion": "example.operon.dev/v1alpha1", "kind": "Thing",
            "metadata": {"name": "t", "namespace": "shop", "generation": generation}, "spec": spec}


def child(kind: str, api_version: str, name: str = "t") -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "shop"}}


@pytest.fixture
def fake_operon(tmp_path: Path, monkeypatch) -> Path:
    """An operon binary that records each call's input and rates everything InProgress."""
    log = tmp_path / "calls"
    script = tmp_path / "operon"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"assert sys.argv[1:] == ['readiness', '-'], sys.argv\n"
        "objects = json.load(sys.stdin)\n"
        f"open({str(log)!r}, 'a').write(json.dumps([o['metadata']['name'] for o in objects]) + '\\n')\n"
        "print(json.dumps([{'status': 'InProgress', 'message': 'rated ' + o['kind']} for o in objects]))\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("OPERON", str(script))
    return log


def test_children_should_be_rated_by_the_operon_binary_in_one_call(fake_operon: Path):
    children = [child("Service", "v1", "b"), child("Deployment", "apps/v1", "a"), child("Service", "v1", "a")]
    out = reconcile(Clock(), request(thing(), children))
    assert out.status["children"] == [
        "Deployment a=in-progress: rated Deployment",
        "Service a=in-progress: rated Service",
        "Service b=in-progress: rated Service",
    ]
    assert fake_operon.read_text().splitlines() == ['["a", "a", "b"]'], "one call, in the host's order"


def test_stated_readiness_should_not_ask_the_binary(fake_operon: Path):
    children = [child("Deployment", "apps/v1"), child("Service", "v1")]
    stated = {("Deployment", "t"): Readiness.current("Available"), ("Service", "t"): Readiness.current()}
    out = reconcile(Clock(), request(thing(), children, readiness=stated))
    assert out.status["ready"] is True
    assert not fake_operon.exists(), "nothing left to rate"
    half = {("Service", "t"): Readiness(ReadinessStatus.FAILED, "no endpoints")}
    out = reconcile(Clock(), request(thing(), children, readiness=half))
    assert out.status["children"] == ["Deployment t=in-progress: rated Deployment", "Service t=failed: no endpoints"]
    assert fake_operon.read_text().splitlines() == ['["t"]']


def test_without_a_binary_children_should_be_unknown_saying_why(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("OPERON", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rate([child("Service", "v1")]) == [Readiness(ReadinessStatus.UNKNOWN, NOT_RATED)]
    assert NOT_RATED == (
        "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), "
        "or pass a readiness"
    )


def test_a_binary_that_fails_should_fail_the_test(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("OPERON", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="cannot run"):
        rate([child("Service", "v1")])
    assert rate([]) == [], "nothing to rate, nothing run"


def test_now_should_be_handed_in_as_the_host_spells_it():
    assert reconcile(Clock(), request(thing())).status["now"] == "1970-01-01T00:00:00.000Z"
    out = reconcile(Clock(), request(thing(), now="2026-01-01T10:00:00+01:00"))
    assert out.status["now"] == "2026-01-01T09:00:00.000Z"


def test_needs_finalizer_should_default_to_the_manifests_finalizer():
    assert reconcile(Clock(), request(thing())).needs_finalizer is True
    assert reconcile(Clock(), request(thing(), finalizing=True)).needs_finalizer is False
    assert reconcile(Clock(), request(thing(keep=False))).needs_finalizer is False, "an explicit call wins"
    assert reconcile(Clock(), request(thing(keep=True), finalizing=True)).needs_finalizer is True
    assert reconcile(Clock(finalizer=None), request(thing())).needs_finalizer is False


def test_statuses_should_get_observed_generation_as_the_host_writes_it():
    assert reconcile(Clock(), request(thing(generation=7))).status["observedGeneration"] == 7
    with pytest.raises(Terminal) as failure:
        reconcile(Clock(), request(thing(generation=7, fail=True)))
    assert failure.value.status == {"ready": False, "now": "1970-01-01T00:00:00.000Z", "observedGeneration": 7}
    assert reconcile(Greeter(), request(greeting(generation=2))).status["observedGeneration"] == 2, "the guest's"


def test_a_parent_that_does_not_fit_should_go_through_invalid():
    parent = thing()
    parent["spec"] = {"at": 5}
    with pytest.raises(Terminal) as failure:
        reconcile(Clock(), request(parent))
    assert failure.value.message == "Thing shop/t is invalid: invalid type: integer `5`, expected a string"
    assert failure.value.status == {"ready": False, "reason": "Invalid", "observedGeneration": 3}
    with pytest.raises(Terminal) as plain:
        reconcile(Greeter(), request({**greeting(), "spec": {}}))
    assert plain.value.status is None, "the default answers the failure as it is"


def test_convert_should_answer_objects_or_refuse():
    assert convert(Clock(), [thing()], "example.operon.dev/v1")[0]["apiVersion"] == "example.operon.dev/v1"
    with pytest.raises(ConversionError) as refused:
        convert(Clock(), [thing()], "example.operon.dev/v2")
    assert refused.value == ConversionError("cannot convert to example.operon.dev/v2")
    assert Clock.has_conversion() and not Greeter.has_conversion()


def write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


def test_check_fixtures_should_run_0_2_requests_as_operon_test_does(tmp_path: Path, fake_operon: Path):
    write(tmp_path, "timer.yaml", """
now: "2026-01-01T09:00:00Z"
object: {apiVersion: example.operon.dev/v1alpha1, kind: Thing, metadata: {name: t, namespace: shop, generation: 4},
         spec: {at: "2026-01-01T09:30:00.0005Z"}}
children: [{apiVersion: v1, kind: Service, metadata: {name: t, namespace: shop}}]
""")
    write(tmp_path, "timer.expected.yaml", """
status:
  now: "2026-01-01T09:00:00.000Z"
  children: ["Service t=in-progress: rated Service"]
  ready: false
  observedGeneration: 4
requeueAfterMs: 1800000
needsFinalizer: true
""")
    write(tmp_path, "past.yaml", """
now: "2026-01-01T09:00:00Z"
object: {apiVersion: example.operon.dev/v1alpha1, kind: Thing, metadata: {name: t, namespace: shop},
         spec: {at: "2025-01-01T00:00:00Z", keep: false}}
""")
    write(tmp_path, "past.expected.yaml", """
status: {now: "2026-01-01T09:00:00.000Z", children: [], ready: true}
requeueAfterMs: 0
needsFinalizer: false
""")
    write(tmp_path, "invalid.yaml", """
now: "2026-01-01T09:00:00Z"
object: {apiVersion: example.operon.dev/v1alpha1, kind: Thing, metadata: {name: t, namespace: shop, generation: 2},
         spec: {fail: true}}
""")
    write(tmp_path, "invalid.expected.yaml", """
error: {terminal: spec.fail is set}
status: {now: "2026-01-01T09:00:00.000Z", observedGeneration: 2, ready: false}
""")
    assert check_fixtures(Clock(), tmp_path) == 3
    assert fake_operon.read_text().splitlines() == ['["t"]']
    # The failure's status is compared too.
    write(tmp_path, "invalid.expected.yaml", "error: {terminal: spec.fail is set}\n")
    with pytest.raises(AssertionError, match="1 of 3 fixtures differ:\ninvalid:"):
        check_fixtures(Clock(), tmp_path)


def test_check_fixtures_should_run_admission_and_conversion_cases(tmp_path: Path):
    write(tmp_path / "admission", "no.yaml", """
review: {operation: update, object: {apiVersion: demo.operon.dev/v1alpha1, kind: Greeting,
  metadata: {name: hello, namespace: default}, spec: {message: "no"}}}
""")
    write(tmp_path / "admission", "no.expected.yaml", """
allowed: false
message: say something else
code: 422
patched: {apiVersion: demo.operon.dev/v1alpha1, kind: Greeting, metadata: {name: hello, namespace: default},
  spec: {message: "no"}}
""")
    write(tmp_path / "admission", "defaulted.yaml", """
review: {object: {apiVersion: demo.operon.dev/v1alpha1, kind: Greeting,
  metadata: {name: hello, namespace: default}, spec: {}}}
""")
    write(tmp_path / "admission", "defaulted.expected.yaml", """
allowed: true
warnings: [greetings are public]
patched: {apiVersion: demo.operon.dev/v1alpha1, kind: Greeting, metadata: {name: hello, namespace: default},
  spec: {message: hello}}
""")
    assert check_fixtures(Guarded(), tmp_path) == 2

    # YAML 1.2, as operon reads it: `on` is a string, in both files.
    conversion = tmp_path / "c" / "conversion"
    write(conversion, "up.yaml", """
desiredAPIVersion: example.operon.dev/v1
objects: [{apiVersion: example.operon.dev/v1alpha1, kind: Thing, spec: {on: on}}]
""")
    write(conversion, "up.expected.yaml", "converted: [{apiVersion: example.operon.dev/v1, kind: Thing, spec: {on: 'on'}}]\n")
    write(tmp_path / "c" / "conversion", "refused.yaml", "desiredAPIVersion: x/v9\nobjects: []\n")
    write(tmp_path / "c" / "conversion", "refused.expected.yaml", "error: cannot convert to x/v9\n")
    assert check_fixtures(Clock(), tmp_path / "c") == 2
    write(tmp_path / "c" / "conversion", "refused.expected.yaml", "error: something else\n")
    with pytest.raises(AssertionError, match="conversion/refused"):
        check_fixtures(Clock(), tmp_path / "c")


def test_fixture_yaml_should_be_read_as_yaml_1_2_as_operon_does():
    from operon_sdk.testing import _yaml

    yaml, loader = _yaml()
    text = "a: on\nb: yes\nc: true\nd: 017\ne: 0x1f\nf: 1:20\ng: 1_000\nh: 2.5\ni: 2026-01-01T00:00:00Z\nj: ~\n"
    assert yaml.load(text, Loader=loader) == {
        "a": "on", "b": "yes", "c": True, "d": 17, "e": 31, "f": "1:20", "g": "1_000", "h": 2.5,
        "i": "2026-01-01T00:00:00Z", "j": None,
    }


def test_check_fixtures_should_run_fixtures_in_a_subdirectory_named_by_their_path(tmp_path: Path, greeter):
    (tmp_path / "create.yaml").write_text(FIXTURE)
    (tmp_path / "create.expected.yaml").write_text(EXPECTED)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "live.yaml").write_text(FIXTURE)
    (recorded / "live.expected.yaml").write_text(EXPECTED.replace("observedGeneration: 1", "observedGeneration: 9"))
    with pytest.raises(AssertionError, match="1 of 2 fixtures differ:\nrecorded/live:"):
        check_fixtures(greeter, tmp_path)
    (recorded / "live.expected.yaml").write_text(EXPECTED)
    assert check_fixtures(greeter, tmp_path) == 2
