"""The WebApp reconciler natively, through the SDK's testing path (the same code
the component runs). The shared fixtures cover whole scenarios; these tests
pin single rules, as rust-webapp's do."""

from __future__ import annotations

from pathlib import Path

import pytest

from operon_sdk import Denied, Terminal
from operon_sdk.testing import check_fixtures, mutate, reconcile, request, review, validate
from webapp import FINALIZER, WebAppReconciler

FIXTURES = Path(__file__).parent.parent.parent / "webapp" / "fixtures"


def webapp(spec: dict, **status) -> dict:
    obj = {
        "apiVersion": "example.operon.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {
            "name": "shop",
            "namespace": "default",
            "uid": "3f0c6a52-8d1e-4b7a-9c2d-5e8f1a2b3c4d",
            "generation": 5,
            "creationTimestamp": "2026-11-20T10:00:00Z",
        },
        "spec": spec,
    }
    if status:
        obj["status"] = status
    return obj


def deployment(replicas: int, ready: int, image: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "default", "generation": 7},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
        "status": {
            "observedGeneration": 7,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "conditions": [
                {"type": "Available", "lastUpdateTime": "2026-11-20T10:07:00Z",
                 "lastTransitionTime": "2026-11-20T10:02:00Z"}
            ],
        },
    }


def run(parent: dict, children=(), finalizing: bool = False):
    return reconcile(WebAppReconciler(), request(parent, list(children), finalizing=finalizing))


def ready_condition(outcome) -> dict:
    return outcome.status["conditions"][0]


def test_shared_fixtures_should_pass_natively():
    assert check_fixtures(WebAppReconciler(), FIXTURES) == 7


def test_manifest_should_own_deployment_service_and_ingress_in_that_order():
    m = WebAppReconciler().manifest()
    assert m.name == "webapp"
    assert str(m.for_kind) == "example.operon.dev/v1alpha1 WebApp"
    assert [str(k) for k in m.owns] == ["apps/v1 Deployment", "v1 Service", "networking.k8s.io/v1 Ingress"]
    assert m.finalizer == FINALIZER


def test_spec_defaults_should_match_the_crd():
    out = run(webapp({"image": "nginx:1.27"}))
    d = out.find("Deployment", "shop")
    assert d["spec"]["replicas"] == 1
    container = d["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8080
    assert "env" not in container
    assert out.find("Service", "shop")["spec"]["ports"][0]["port"] == 8080


def test_children_should_carry_the_labels_and_select_the_pods():
    out = run(webapp({"image": "nginx:1.27"}))
    labels = {"app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "operon"}
    for obj in out.desired:
        assert obj["metadata"]["labels"] == labels, obj["kind"]
    d = out.find("Deployment", "shop")
    assert d["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "shop"}
    assert d["spec"]["template"]["metadata"]["labels"] == labels
    assert out.find("Service", "shop")["spec"]["selector"] == {"app.kubernetes.io/name": "shop"}


def test_ingress_should_follow_spec_ingress():
    with_ingress = run(webapp({"image": "nginx:1.27", "ingress": {"host": "shop.example.com"}}))
    ingress = with_ingress.find("Ingress", "shop")
    path = ingress["spec"]["rules"][0]["http"]["paths"][0]
    assert path["path"] == "/"
    assert path["backend"]["service"] == {"name": "shop", "port": {"name": "http"}}
    assert "ingressClassName" not in ingress["spec"]
    without = run(webapp({"image": "nginx:1.27"}))
    assert len(without.desired) == 2 and without.find("Ingress", "shop") is None


def test_ready_should_need_the_current_spec_rolled_out():
    spec = {"image": "nginx:1.27", "replicas": 2}
    ready = run(webapp(spec), [deployment(2, 2, "nginx:1.27")])
    assert ready_condition(ready)["status"] == "True"
    assert ready.status["readyReplicas"] == 2
    old_image = run(webapp(spec), [deployment(2, 2, "nginx:1.26")])
    assert ready_condition(old_image)["status"] == "False"
    assert ready_condition(old_image)["reason"] == "Progressing"
    assert old_image.reasons == ["Updated"]
    short = run(webapp(spec), [deployment(2, 1, "nginx:1.27")])
    assert ready_condition(short)["message"] == "1 of 2 replicas ready"


def test_last_transition_time_should_be_kept_while_the_condition_holds():
    parent = webapp(
        {"image": "nginx:1.27", "replicas": 2},
        conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:03:00Z",
                     "reason": "Available", "message": "2 of 2 replicas ready"}],
    )
    out = run(parent, [deployment(2, 2, "nginx:1.27")])
    assert ready_condition(out)["lastTransitionTime"] == "2026-11-20T10:03:00Z"
    assert out.events == [], "a steady state records no events"


def test_last_transition_time_should_be_the_latest_time_the_request_shows_on_a_change():
    out = run(webapp({"image": "nginx:1.27", "replicas": 2}), [deployment(2, 2, "nginx:1.27")])
    assert ready_condition(out)["lastTransitionTime"] == "2026-11-20T10:07:00Z"
    assert out.reasons == ["Available"]


def test_reconcile_should_be_deterministic_and_never_requeue():
    parent = webapp({"image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]})
    first = run(parent, [deployment(3, 1, "nginx:1.27")])
    second = run(parent, [deployment(3, 1, "nginx:1.27")])
    assert first == second
    assert first.requeue_after_ms is None, "owned Deployment changes trigger reconciles; no polling"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": 1}, "WebApp default/shop is invalid: missing field `image`"),
        ({"image": " "}, "spec.image must not be empty"),
        ({"image": "x", "replicas": -1}, "spec.replicas must be 0 or more, not -1"),
        ({"image": "x", "port": 70000}, "spec.port must be between 1 and 65535, not 70000"),
        ({"image": "x", "env": [{"name": "A"}, {"name": "A"}]}, "spec.env[1]: A is set twice"),
        ({"image": "x", "env": [{"name": ""}]}, "spec.env[0].name must not be empty"),
        ({"image": "x", "ingress": {"host": "h", "path": "store"}}, "spec.ingress.path must start with /"),
        ({"image": "x", "ingress": {"host": ""}}, "spec.ingress.host must not be empty"),
        ({"image": "x", "replicas": "2"}, 'WebApp default/shop is invalid: invalid type: string "2", expected i32'),
    ],
)
def test_invalid_specs_should_be_terminal(spec, message):
    with pytest.raises(Terminal) as failure:
        run(webapp(spec))
    assert failure.value == Terminal(message)


def test_finalizing_should_want_nothing_and_finish():
    out = run(webapp({"image": "nginx:1.27"}), [deployment(1, 1, "nginx:1.27")], finalizing=True)
    assert out.desired == [] and out.finalized and out.status is None
    assert out.reasons == ["Cleanup"]


# --- admission ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.image must not be empty"),
        ({"image": "  "}, "spec.image must not be empty"),
        ({"image": 5}, "spec.image must not be empty"),
        ({"image": "x", "replicas": 51}, "spec.replicas must be between 0 and 50, not 51"),
        ({"image": "x", "replicas": -1}, "spec.replicas must be between 0 and 50, not -1"),
        ({"image": "x", "replicas": "3"}, 'spec.replicas must be between 0 and 50, not "3"'),
        ({"image": "x", "replicas": 2.5}, "spec.replicas must be between 0 and 50, not 2.5"),
        ({"image": "x", "port": 0}, "spec.port must be between 1 and 65535, not 0"),
        ({"image": "x", "port": 65536}, "spec.port must be between 1 and 65535, not 65536"),
        ({"image": "", "replicas": 99, "port": 0}, "spec.image must not be empty"),
        ({"image": "x", "replicas": 99, "port": 0}, "spec.replicas must be between 0 and 50, not 99"),
    ],
)
def test_validate_should_deny_the_first_problem(spec, message):
    with pytest.raises(Denied) as denied:
        validate(WebAppReconciler(), review("create", webapp(spec)))
    assert denied.value == Denied(message, None)


def test_validate_should_allow_good_specs_and_deletes():
    r = WebAppReconciler()
    assert validate(r, review("create", webapp({"image": "x", "replicas": 0, "port": 1}))) == []
    assert validate(r, review("update", webapp({"image": "x", "replicas": 50, "port": 65535}), webapp({}))) == []
    assert validate(r, review("delete", None, webapp({}))) == []
    assert validate(r, review("connect", webapp({}))) == []
    # A null field counts as absent; an integral float counts as an integer.
    assert validate(r, review("create", webapp({"image": "x", "replicas": None, "port": None}))) == []
    assert validate(r, review("create", webapp({"image": "x", "replicas": 3.0}))) == []


def test_mutate_should_default_the_port_on_create_and_update_only():
    r = WebAppReconciler()
    created = mutate(r, review("create", webapp({"image": "x"})))
    assert created == webapp({"image": "x", "port": 8080})
    assert mutate(r, review("update", webapp({"image": "x", "port": None})))["spec"]["port"] == 8080
    assert mutate(r, review("create", webapp({"image": "x", "port": 9000}))) is None
    assert mutate(r, review("delete", None, webapp({"image": "x"}))) is None
