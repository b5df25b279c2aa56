"""Requests are read and outcomes written as the host expects."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from operon_sdk import (
    CONFIG_MAP,
    DEPLOYMENT,
    SERVICE,
    Gvk,
    Outcome,
    Readiness,
    ReadinessStatus,
    Request,
    Terminal,
    Transient,
    format_time,
    parse_time,
)
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


CURRENT = Readiness(ReadinessStatus.CURRENT, "Deployment is available")


def test_children_should_be_found_by_kind_and_name():
    deployments = [(json.dumps(obj("apps/v1", "Deployment", n)), CURRENT) for n in ("a", "b")]
    services = [(json.dumps(obj("v1", "Service", "svc")), CURRENT)]
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


# --- contract 0.2 ---------------------------------------------------------------------------------


def test_now_should_be_the_hosts_text_and_a_datetime():
    request = Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"), now="2026-11-26T04:05:06.789Z"))
    assert request.now == "2026-11-26T04:05:06.789Z", "as the host gave it"
    assert request.now_time == datetime(2026, 11, 26, 4, 5, 6, 789000, tzinfo=timezone.utc)
    assert Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"))).now == "1970-01-01T00:00:00.000Z"


def test_times_should_be_rfc_3339_with_an_offset():
    assert parse_time("2026-01-01T09:00:00Z") == datetime(2026, 1, 1, 9, tzinfo=timezone.utc)
    assert parse_time("2026-01-01t10:00:00.5+01:00") == datetime(2026, 1, 1, 9, 0, 0, 500000, tzinfo=timezone.utc)
    for bad in ("2026-01-01T09:00:00", "2026-01-01", "09:00", "tomorrow", "2026-01-01T09:00Z"):
        with pytest.raises(ValueError):
            parse_time(bad)
    assert format_time(datetime(2026, 1, 1, 9, 0, 0, 123999, tzinfo=timezone.utc)) == "2026-01-01T09:00:00.123Z"
    with pytest.raises(ValueError, match="no time zone"):
        format_time(datetime(2026, 1, 1))


def test_each_childs_readiness_should_be_looked_up_and_all_current_told():
    pending = Readiness(ReadinessStatus.IN_PROGRESS, "Available: 1/2")
    children = [
        (DEPLOYMENT, [(json.dumps(obj("apps/v1", "Deployment", "web")), pending)]),
        (SERVICE, [(json.dumps(obj("v1", "Service", "web")), CURRENT)]),
    ]
    request = Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"), children))
    assert request.readiness(DEPLOYMENT, "web") == pending and not pending.is_current
    assert request.readiness(SERVICE, "web").is_current
    assert request.readiness(SERVICE, "other") is None
    assert [(o["kind"], r.status) for o, r in request.rated_children(DEPLOYMENT)] == [
        ("Deployment", ReadinessStatus.IN_PROGRESS)
    ]
    assert not request.all_children_current()
    children[0] = (DEPLOYMENT, [(json.dumps(obj("apps/v1", "Deployment", "web")), CURRENT)])
    assert Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"), children)).all_children_current()
    assert Request.from_raw(raw_request(obj("v1", "ConfigMap", "p"))).all_children_current(), "no children"


def test_requeue_at_should_take_rfc_3339_text_or_an_aware_datetime():
    assert Outcome().requeue_at("2026-01-01T09:30:00Z").to_raw().requeue_at == "2026-01-01T09:30:00Z"
    at = datetime(2026, 1, 1, 10, 30, tzinfo=timezone(timedelta(hours=1)))
    assert Outcome().requeue_at(at).to_raw().requeue_at == "2026-01-01T09:30:00.000Z"
    with pytest.raises(ValueError):
        Outcome().requeue_at("half past nine")
    with pytest.raises(ValueError):
        Outcome().requeue_at(datetime(2026, 1, 1))
    assert Outcome().to_raw().requeue_at is None


def test_needs_finalizer_and_parent_metadata_should_reach_the_record():
    raw = Outcome().to_raw()
    assert raw.needs_finalizer is None and raw.parent_metadata is None, "left to the defaults"
    assert Outcome().needs_finalizer().to_raw().needs_finalizer is True
    assert Outcome().needs_finalizer(False).to_raw().needs_finalizer is False
    meta = Outcome().parent_metadata({"team": "web"}, {"example.com/note": "x"}).to_raw().parent_metadata
    assert (meta.labels, meta.annotations) == ({"team": "web"}, {"example.com/note": "x"})
    assert Outcome().parent_metadata().to_raw().parent_metadata.labels == {}, "an empty set removes ours"
    with pytest.raises(TypeError):
        Outcome().parent_metadata({"replicas": 3})


def test_failures_should_carry_a_status():
    from dataclasses import dataclass

    @dataclass
    class Status:
        ready_replicas: int

    failure = Terminal("bad spec", status=Status(2))
    assert failure.status == {"readyReplicas": 2}
    assert failure != Terminal("bad spec"), "the status is part of the answer"
    assert failure.context("spec") == Terminal("spec: bad spec", {"readyReplicas": 2})
    assert Transient("x").with_status({"a": 1}).status == {"a": 1}
    assert Transient("x").status is None
    with pytest.raises(TypeError):
        Terminal("x", status=[1])
