"""The WebApp reconciler natively, through the SDK's testing path (the same code
the component runs). The shared fixtures cover whole scenarios; these tests
pin single rules, as rust-webapp's do."""

from __future__ import annotations

from pathlib import Path

import pytest

from operon_sdk import ConversionError, Denied, Readiness, ReadinessStatus, Terminal
from operon_sdk.testing import check_fixtures, convert, mutate, reconcile, request, review, validate
from webapp import FINALIZER, WebAppReconciler
from webapp.conversion import V1, V1ALPHA1

FIXTURES = Path(__file__).parent.parent.parent / "webapp" / "fixtures"
NOW = "2026-11-26T04:05:06.789Z"
CURRENT = Readiness.current("Deployment is available. Replicas: 2")


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
        "status": {"observedGeneration": 7, "readyReplicas": ready},
    }


def child(kind: str, api_version: str) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "shop", "namespace": "default"}}


SERVICE_CHILD = child("Service", "v1")
INGRESS_CHILD = child("Ingress", "networking.k8s.io/v1")


def run(parent: dict, children=(), finalizing: bool = False, **readiness: Readiness):
    """Reconcile at NOW, every child current unless ``readiness`` (by kind) says otherwise."""
    stated = {(c["kind"], "shop"): readiness.get(c["kind"], CURRENT) for c in children}
    req = request(parent, list(children), finalizing=finalizing, now=NOW, readiness=stated)
    return reconcile(WebAppReconciler(), req)


def ready_condition(outcome) -> dict:
    return outcome.status["conditions"][0]


def verdict(outcome) -> tuple[str, str, str]:
    c = ready_condition(outcome)
    return c["status"], c["reason"], c["message"]


def fixture_cases(directory: Path) -> list[Path]:
    return [p for sub in ("", "admission", "conversion") for p in (directory / sub).glob("*.yaml")
            if ".expected." not in p.name]


def test_shared_fixtures_should_pass_natively():
    # Requests, admission reviews and conversions, as operon test runs them.
    assert check_fixtures(WebAppReconciler(), FIXTURES) == len(fixture_cases(FIXTURES)) > 7


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


SPEC = {"image": "nginx:1.27", "replicas": 2}


def test_a_missing_child_should_come_first_in_the_order_deployment_service_ingress():
    assert verdict(run(webapp(SPEC), [SERVICE_CHILD])) == (
        "False", "Progressing", "deployment shop does not exist yet"
    )
    assert verdict(run(webapp(SPEC), [deployment(2, 2, "nginx:1.26")])) == (
        "False", "Progressing", "service shop does not exist yet"
    ), "before the Deployment's update"
    wants_ingress = webapp({**SPEC, "ingress": {"host": "shop.example.com"}})
    assert verdict(run(wants_ingress, [deployment(2, 2, "nginx:1.27"), SERVICE_CHILD])) == (
        "False", "Progressing", "ingress shop does not exist yet"
    )


def test_a_deployment_not_running_the_spec_should_be_progressing():
    old_image = run(webapp(SPEC), [deployment(2, 2, "nginx:1.26"), SERVICE_CHILD])
    assert verdict(old_image) == ("False", "Progressing", "deployment shop is being updated: 2 of 2 replicas ready")
    assert old_image.reasons == ["Updated"]
    scaling = run(webapp(SPEC), [deployment(3, 1, "nginx:1.27"), SERVICE_CHILD])
    assert verdict(scaling) == ("False", "Progressing", "deployment shop is being updated: 1 of 2 replicas ready")
    assert scaling.status["readyReplicas"] == 1


def test_a_child_not_current_should_say_its_readiness():
    children = [deployment(2, 1, "nginx:1.27"), SERVICE_CHILD]
    rolling = run(webapp(SPEC), children, Deployment=Readiness(ReadinessStatus.IN_PROGRESS, "Available: 1/2"))
    assert verdict(rolling) == ("False", "Progressing", "Deployment shop: Available: 1/2")
    stuck = run(webapp(SPEC), children, Service=Readiness(ReadinessStatus.FAILED, "no endpoints"))
    assert verdict(stuck) == ("False", "Failed", "Service shop: no endpoints")
    both = run(webapp(SPEC), children, Deployment=Readiness(ReadinessStatus.UNKNOWN, "malformed"),
               Service=Readiness(ReadinessStatus.FAILED, "no endpoints"))
    assert verdict(both) == ("False", "Progressing", "Deployment shop: malformed"), "the Deployment first"


def test_every_child_current_should_be_ready():
    out = run(webapp(SPEC), [deployment(2, 2, "nginx:1.27"), SERVICE_CHILD])
    assert verdict(out) == ("True", "Available", "2 of 2 replicas ready")
    assert out.status["readyReplicas"] == 2 and out.status["observedGeneration"] == 5
    assert ready_condition(out)["observedGeneration"] == 5
    assert out.reasons == ["Available"]
    # An Ingress no longer wanted is ignored, whatever its readiness.
    stale = run(webapp(SPEC), [deployment(2, 2, "nginx:1.27"), SERVICE_CHILD, INGRESS_CHILD],
                Ingress=Readiness(ReadinessStatus.FAILED, "no address"))
    assert verdict(stale) == ("True", "Available", "2 of 2 replicas ready")
    assert stale.reasons == ["IngressRemoved", "Available"]


def test_last_transition_time_should_be_kept_while_the_status_holds_else_be_now():
    parent = webapp(SPEC, conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:03:00Z",
                                       "reason": "Available", "message": "2 of 2 replicas ready"}])
    steady = run(parent, [deployment(2, 2, "nginx:1.27"), SERVICE_CHILD])
    assert ready_condition(steady)["lastTransitionTime"] == "2026-11-20T10:03:00Z"
    assert steady.events == [], "a steady state records no events"
    changed = run(parent, [deployment(2, 1, "nginx:1.27"), SERVICE_CHILD],
                  Deployment=Readiness(ReadinessStatus.IN_PROGRESS, "Available: 1/2"))
    assert ready_condition(changed)["lastTransitionTime"] == NOW, "the host's now, exactly"


def test_every_outcome_should_need_the_finalizer_until_it_is_finalized():
    assert run(webapp(SPEC)).needs_finalizer
    done = run(webapp({"image": "nginx:1.27"}), [deployment(1, 1, "nginx:1.27")], finalizing=True)
    assert done.desired == [] and done.finalized and done.status is None
    assert done.reasons == ["Cleanup"] and not done.needs_finalizer


def test_reconcile_should_be_deterministic_and_never_requeue():
    parent = webapp({"image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]})
    first = run(parent, [deployment(3, 1, "nginx:1.27")])
    second = run(parent, [deployment(3, 1, "nginx:1.27")])
    assert first == second
    assert first.requeue_after_ms is None and first.requeue_at is None, "owned children trigger reconciles"


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
def test_invalid_specs_should_be_terminal_and_say_so_in_the_status(spec, message):
    with pytest.raises(Terminal) as failure:
        run(webapp(spec), [deployment(2, 1, "nginx:1.27")])
    assert failure.value.message == message
    assert failure.value.status == {
        "observedGeneration": 5,
        "readyReplicas": 1,
        "conditions": [{"type": "Ready", "status": "False", "observedGeneration": 5, "lastTransitionTime": NOW,
                        "reason": "InvalidSpec", "message": message}],
    }


def test_an_invalid_spec_should_keep_a_false_conditions_transition_time():
    parent = webapp({"image": ""}, conditions=[{"type": "Ready", "status": "False", "reason": "Progressing",
                                               "lastTransitionTime": "2026-11-20T10:03:00Z", "message": "m"}])
    with pytest.raises(Terminal) as failure:
        run(parent)
    assert failure.value.status["conditions"][0]["lastTransitionTime"] == "2026-11-20T10:03:00Z"
    assert failure.value.status["readyReplicas"] == 0, "no Deployment"


# --- conversion ---------------------------------------------------------------------------------


def versioned(api_version: str, spec: dict) -> dict:
    return {"apiVersion": api_version, "kind": "WebApp", "metadata": {"name": "shop", "uid": "u"}, "spec": spec,
            "status": {"readyReplicas": 2}}


def test_a_round_trip_should_lose_nothing():
    old = versioned(V1ALPHA1, {"image": "nginx:1.27", "port": 8080, "replicas": 2, "env": []})
    (new,) = convert(WebAppReconciler(), [old], V1)
    assert new == versioned(V1, {"container": {"image": "nginx:1.27", "port": 8080, "env": []}, "replicas": 2})
    assert convert(WebAppReconciler(), [new], V1ALPHA1) == [old]


def test_an_object_at_the_desired_version_should_be_returned_as_it_is():
    same = versioned(V1, {"replicas": 1, "container": {"image": "x"}})
    assert convert(WebAppReconciler(), [same], V1) == [same]
    (bare,) = convert(WebAppReconciler(), [versioned(V1ALPHA1, {"replicas": 1})], V1)
    assert bare["spec"] == {"replicas": 1}, "no empty container"


def test_other_versions_and_kinds_should_be_refused_by_name():
    versions = "WebApp has versions example.operon.dev/v1alpha1 and example.operon.dev/v1"
    with pytest.raises(ConversionError) as refused:
        convert(WebAppReconciler(), [], "example.operon.dev/v2")
    assert refused.value.message == f"cannot convert to example.operon.dev/v2: {versions}"
    with pytest.raises(ConversionError) as refused:
        convert(WebAppReconciler(), [versioned(V1, {}), {"apiVersion": "v1", "kind": "ConfigMap"}], V1ALPHA1)
    assert refused.value.message == f"cannot convert v1 ConfigMap: {versions}"


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
