"""The ScheduledScale reconciler natively, through the SDK's testing path (the
same code the component runs). The shared fixtures cover whole scenarios at
fixed clock values; these tests pin single rules, as rust-scheduledscale's do."""

from __future__ import annotations

from pathlib import Path

import pytest

from operon_sdk import Readiness, Terminal
from operon_sdk.testing import check_fixtures, reconcile, request
from scheduledscale import ScheduledScaleReconciler, deployment

FIXTURES = Path(__file__).parent.parent.parent / "scheduledscale" / "fixtures"
SCHEDULE = [{"at": "08:00", "replicas": 3}, {"at": "20:00", "replicas": 1}]
NOW = "2026-11-26T09:15:00.000Z"


def scheduledscale(spec: dict) -> dict:
    return {
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "ScheduledScale",
        "metadata": {
            "name": "shop",
            "namespace": "default",
            "uid": "7c1d2e3f-0000-4e6a-8b9c-000000000001",
            "generation": 4,
            "creationTimestamp": "2026-11-26T07:00:00Z",
        },
        "spec": spec,
    }


def existing(spec: dict | None) -> dict:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop", "namespace": "default"}}
    if spec is not None:
        obj["spec"] = spec
    return obj


def run(spec: dict, children=(), now: str = NOW):
    stated = {(c["kind"], c["metadata"]["name"]): Readiness.current() for c in children}
    return reconcile(ScheduledScaleReconciler(), request(scheduledscale(spec), list(children), now=now, readiness=stated))


SPEC = {"image": "nginx:1.27", "schedule": SCHEDULE}


def test_shared_fixtures_should_pass_natively():
    cases = [p for p in FIXTURES.glob("*.yaml") if ".expected." not in p.name]
    assert check_fixtures(ScheduledScaleReconciler(), FIXTURES) == len(cases) == 6


def test_manifest_should_own_deployments_only():
    m = ScheduledScaleReconciler().manifest()
    assert m.name == "scheduledscale"
    assert str(m.for_kind) == "example.operon.dev/v1alpha1 ScheduledScale"
    assert [str(k) for k in m.owns] == ["apps/v1 Deployment"]
    assert m.finalizer is None


def test_the_deployment_should_run_the_image_with_the_entrys_replicas():
    out = run(SPEC)
    assert out.desired == [deployment("shop", "nginx:1.27", 3)]
    d = out.find("Deployment", "shop")
    labels = {"app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "operon"}
    assert d["metadata"] == {"name": "shop", "labels": labels}
    assert d["spec"]["replicas"] == 3
    assert d["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "shop"}}
    assert d["spec"]["template"]["metadata"]["labels"] == labels
    assert d["spec"]["template"]["spec"]["containers"] == [{"name": "app", "image": "nginx:1.27"}]


def test_status_should_say_the_entry_in_force_and_the_next_change():
    out = run(SPEC)
    assert out.status == {
        "observedGeneration": 4,
        "replicas": 3,
        "activeSince": "2026-11-26T08:00:00Z",
        "nextChange": "2026-11-26T20:00:00Z",
    }


def test_requeue_at_should_be_the_next_change_and_nothing_else():
    out = run(SPEC, now="2026-11-26T03:00:00.250Z")
    assert out.requeue_at == "2026-11-26T08:00:00.000Z"
    assert out.requeue_after_ms is None
    assert run(SPEC, now="2026-11-26T20:00:00.000Z").requeue_at == "2026-11-27T08:00:00.000Z"


def test_events_should_say_what_changes():
    created = run(SPEC)
    assert [(e.reason, e.message) for e in created.events] == [
        ("Created", "creating deployment shop with 3 replicas (08:00 entry)")
    ]
    scaled = run(SPEC, [existing({"replicas": 1})])
    assert [(e.reason, e.message) for e in scaled.events] == [
        ("Scaled", "scaling deployment shop from 1 to 3 replicas (08:00 entry)")
    ]
    assert run(SPEC, [existing({"replicas": 3})]).events == [], "in step: nothing to say"


def test_a_deployment_without_replicas_should_count_as_one():
    night = "2026-11-26T21:00:00.000Z"  # the 20:00 entry: 1 replica
    assert run(SPEC, [existing({})], now=night).events == []
    assert run(SPEC, [existing(None)], now=night).events == []
    assert run(SPEC, [existing({"replicas": None})], now=night).events == []
    scaled = run(SPEC, [existing({})])
    assert [e.message for e in scaled.events] == ["scaling deployment shop from 1 to 3 replicas (08:00 entry)"]


def test_an_entry_should_be_named_as_written():
    spec = {"image": "nginx:1.27", "schedule": [{"at": "08:00:30", "replicas": 2}]}
    out = run(spec, now="2026-11-26T09:00:00.000Z")
    assert out.events[0].message == "creating deployment shop with 2 replicas (08:00:30 entry)"
    assert out.status["activeSince"] == "2026-11-26T08:00:30Z"


def test_an_entry_without_replicas_should_have_one():
    out = run({"image": "nginx:1.27", "schedule": [{"at": "08:00"}]})
    assert out.status["replicas"] == 1


def test_reconcile_should_be_a_function_of_the_request():
    assert run(SPEC, [existing({"replicas": 1})]) == run(SPEC, [existing({"replicas": 1})])
    assert run(SPEC).status != run(SPEC, now="2026-11-26T21:00:00.000Z").status


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"schedule": SCHEDULE}, "spec.image must not be empty"),
        ({"image": "nginx:1.27"}, "spec.schedule must have at least one entry"),
        (
            {"image": "nginx:1.27", "schedule": [{"at": "8:00", "replicas": 3}]},
            'spec.schedule[0].at "8:00" is not a time of day such as 08:00 or 08:00:30',
        ),
        (
            {"image": "nginx:1.27", "schedule": [{"at": "08:00", "replicas": -2}]},
            "spec.schedule[0].replicas must be 0 or more, not -2",
        ),
        (
            {"image": "nginx:1.27", "schedule": [*SCHEDULE, {"at": "08:00", "replicas": 5}]},
            "spec.schedule[2].at 08:00 is listed twice",
        ),
        # What does not fit the types: the SDK's wording, as serde's in Rust.
        (
            {"image": "nginx:1.27", "schedule": [{"at": "08:00", "replicas": "3"}]},
            'ScheduledScale default/shop is invalid: invalid type: string "3", expected i32',
        ),
        (
            {"image": None, "schedule": SCHEDULE},
            "ScheduledScale default/shop is invalid: invalid type: null, expected a string",
        ),
    ],
)
def test_an_invalid_spec_should_be_terminal(spec, message):
    with pytest.raises(Terminal) as failure:
        run(spec)
    assert failure.value.message == message
    assert failure.value.status is None


def test_a_parent_without_spec_should_be_terminal():
    parent = scheduledscale({})
    del parent["spec"]
    with pytest.raises(Terminal) as failure:
        reconcile(ScheduledScaleReconciler(), request(parent, now=NOW))
    assert failure.value.message == "ScheduledScale default/shop is invalid: missing field `spec`"
