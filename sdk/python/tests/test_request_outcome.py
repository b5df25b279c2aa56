"""Requests are read and outcomes written as the host expects."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from operon_sdk import CONFIG_MAP, DEPLOYMENT, SERVICE, Gvk, Outcome, Request, Terminal, Transient
from operon_sdk.request import RawRequest


def obj(api_version: str, kind: str, name: str, **extra) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "ns"}, **extra}


def raw_request(parent: dict, children=(), **kw) -> RawRequest:
    return RawRequest(object=json.dumps(parent), children=list(children), **kw)


def test_metadata_should_be_read_from_the_parent():
    parent = obj("v1", "ConfigMap", "parent")
    parent["metadata"].update(generation=4, labels={"team": "web"}, annotations=None)
    request = Request.from_raw(raw_request(parent, attempt=3))
    assert (request.name, request.namespace, request.generation) == ("parent", "ns", 4)
    assert request.metadata.labels == {"team": "web"}
    assert request.metadata.annotations == {}, "null reads as empty"
    assert request.kind == CONFIG_MAP
    assert request.attempt == 3 and not request.finalizing


def test_children_should_be_found_by_kind_and_name():
    deployments = [json.dumps(obj("apps/v1", "Deployment", n)) for n in ("a", "b")]
    services = [json.dumps(obj("v1", "Service", "svc"))]
    request = Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"), [(DEPLOYMENT, deployments), (SERVICE, services)]))
    assert [d["metadata"]["name"] for d in request.children(DEPLOYMENT)] == ["a", "b"]
    assert request.child(DEPLOYMENT, "b")["kind"] == "Deployment"
    assert request.child(DEPLOYMENT, "svc") is None
    assert request.has_child(SERVICE, "svc") and not request.has_child(SERVICE, "a")
    assert request.children(CONFIG_MAP) == [], "not owned: empty"


def test_related_objects_should_be_filtered_by_kind():
    related = [json.dumps(obj("v1", "Secret", "s")), json.dumps(obj("v1", "ConfigMap", "c"))]
    request = Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"), related=related))
    assert [o["metadata"]["name"] for o in request.related(CONFIG_MAP)] == ["c"]
    assert len(request.all_related) == 2


def test_a_parent_that_does_not_fit_should_be_a_terminal_failure_naming_it():
    from dataclasses import dataclass

    @dataclass
    class Strict:
        spec: dict

    with pytest.raises(Terminal) as error:
        Request.from_raw(raw_request(obj("v1", "ConfigMap", "p")), Strict)
    assert error.value == Terminal("ConfigMap ns/p is invalid: missing field `spec`")
    with pytest.raises(Terminal, match="^the parent is not a Kubernetes object"):
        Request.from_raw(RawRequest(object="[1]"))


def test_outcome_should_serialize_compactly_with_integer_milliseconds():
    raw = (
        Outcome()
        .apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"n": "1"}})
        .set_status({"replicas": 3})
        .event("Configured", "done")
        .warning("Slow", "took long")
        .requeue_after(timedelta(seconds=1.5))
        .to_raw()
    )
    assert raw.desired == ['{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"n":"1"}}']
    assert raw.status == '{"replicas":3}'
    assert [(e.reason, e.warning) for e in raw.events] == [("Configured", False), ("Slow", True)]
    assert raw.requeue_after_ms == 1500
    assert not raw.finalized and Outcome().finish().to_raw().finalized


def test_apply_should_refuse_objects_without_a_kind_and_fill_it_when_given():
    with pytest.raises(Terminal, match="desired object x has no kind"):
        Outcome().apply({"apiVersion": "v1", "metadata": {"name": "x"}})
    out = Outcome().apply({"metadata": {"name": "s"}}, kind=Gvk("", "v1", "ConfigMap"))
    assert out.desired[0]["kind"] == "ConfigMap" and out.desired[0]["apiVersion"] == "v1"


def test_status_should_be_an_object():
    with pytest.raises(Terminal):
        Outcome().set_status(3)


def test_requeue_should_refuse_negative_delays():
    with pytest.raises(ValueError):
        Outcome().requeue_after(-1)


def test_failures_should_compare_by_kind_and_message():
    assert Transient("x") == Transient("x") != Terminal("x")
    assert Transient("not found").context("secret db") == Transient("secret db: not found")
    assert Terminal("a").terminal and not Transient("a").terminal
