"""The native path (operon_sdk.testing) behaves as the host: reads scoped to the
parent's namespace, selectors, fixtures, admission."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Greeter, greeting

from operon_sdk import CONFIG_MAP, SECRET, Denied, Gvk, Manifest, Outcome, Reconciler, Terminal, Transient
from operon_sdk.selector import Selector, SelectorError
from operon_sdk.testing import FakeCluster, check_fixtures, mutate, reconcile, request, review, validate


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
"""


def test_check_fixtures_should_pass_matching_outcomes_and_fail_others(tmp_path: Path, greeter):
    (tmp_path / "create.yaml").write_text(FIXTURE)
    (tmp_path / "create.expected.yaml").write_text(EXPECTED)
    assert check_fixtures(greeter, tmp_path) == 1

    (tmp_path / "create.expected.yaml").write_text(EXPECTED.replace("observedGeneration: 1", "observedGeneration: 1.0"))
    with pytest.raises(AssertionError, match="1 of 1 fixtures differ"):
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
