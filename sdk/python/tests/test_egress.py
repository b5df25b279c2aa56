"""Calls out (ctx.http, contract 0.2's egress): the API, the replay of recorded
exchanges in FakeCluster and in fixtures, and how the guest sees errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from operon_sdk import (
    CONFIG_MAP,
    HttpError,
    HttpRequest,
    HttpResponse,
    Manifest,
    Outcome,
    Reconciler,
    Transient,
)
from operon_sdk.egress import describe
from operon_sdk.testing import (
    Exchange,
    FakeCluster,
    Replay,
    Unrecorded,
    check_fixtures,
    mutate,
    reconcile,
    request,
    review,
)

API = "https://dns.example/api/zones"


class Zones(Reconciler[dict]):
    """Keeps a DNS zone named by the parent's data: looks it up, creates it
    when missing (JSON body), deletes it when finalizing; records in the
    status what the API answered or why it did not."""

    def manifest(self) -> Manifest:
        return Manifest("zones", CONFIG_MAP)

    def reconcile(self, request, ctx) -> Outcome:
        zone = request.raw["data"]["zone"]
        url = f"{API}/{zone}"
        try:
            if request.finalizing:
                ctx.http("DELETE", url, credential="pdns")
                return Outcome().finalize()
            found = ctx.http("GET", url, credential="pdns", headers={"accept": "application/json"})
            if found.status == 404:
                created = ctx.http("POST", API, json={"name": zone, "kind": "Native"}, credential="pdns")
                return Outcome().set_status({"created": created.ok, "serial": created.json()["serial"]})
            return Outcome().set_status({"serial": found.json()["serial"], "server": found.header("Server")})
        except HttpError as error:
            return Outcome().set_status({"error": error.kind, "message": error.message})


def zone_parent(zone: str = "a.") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "z", "namespace": "dns"},
            "data": {"zone": zone}}


def write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


PARENT = "object: {apiVersion: v1, kind: ConfigMap, metadata: {name: z, namespace: dns}, data: {zone: a.}}\n"


def test_a_fixture_with_egress_should_answer_the_calls_from_its_recording(tmp_path: Path):
    write(tmp_path, "existing.yaml", PARENT + """
egress:
- request: {method: GET, url: "https://dns.example/api/zones/a.", credential: pdns}
  response: {status: 200, headers: {content-type: application/json, server: pdns}, body: '{"serial": 7}'}
""")
    write(tmp_path, "existing.expected.yaml", "status: {serial: 7, server: pdns}\nneedsFinalizer: false\n")
    # The JSON body as the SDK sends it (compact, keys in order) matches the recorded text.
    write(tmp_path, "created.yaml", PARENT + """
egress:
- request: {method: get, url: "https://dns.example/api/zones/a.", credential: pdns, headers: {x-ignored: yes}}
  response: {status: 404}
- request: {method: POST, url: "https://dns.example/api/zones", credential: pdns,
            body: '{"name":"a.","kind":"Native"}'}
  response: {status: 201, body: '{"serial": 1}'}
- request: {method: GET, url: "https://dns.example/unused"}
  response: {status: 500}
""")
    write(tmp_path, "created.expected.yaml", "status: {created: true, serial: 1}\nneedsFinalizer: false\n")
    assert check_fixtures(Zones(), tmp_path) == 2


def test_a_call_the_fixture_does_not_hold_should_fail_it_naming_the_call(tmp_path: Path):
    # The guest catches the notRecorded error and answers a status: the fixture fails anyway.
    write(tmp_path, "gone.yaml", PARENT + "finalizing: true\n")
    write(tmp_path, "gone.expected.yaml", "finalized: true\n")
    write(tmp_path, "other.yaml", PARENT + """
egress:
- request: {method: GET, url: "https://dns.example/api/zones/b.", credential: pdns}
  response: {status: 200, body: '{"serial": 7}'}
""")
    write(tmp_path, "other.expected.yaml", "status: {error: notRecorded}\n")
    with pytest.raises(AssertionError) as failed:
        check_fixtures(Zones(), tmp_path)
    text = str(failed.value)
    assert "2 of 2 fixtures differ" in text
    assert ('gone: the guest made calls the fixture\'s `egress` does not hold: '
            'DELETE https://dns.example/api/zones/a. with credential "pdns"') in text
    assert ('other: the guest made calls the fixture\'s `egress` does not hold: '
            'GET https://dns.example/api/zones/a. with credential "pdns"') in text


def test_a_recorded_error_should_reach_the_guest_as_an_http_error_of_its_kind(tmp_path: Path):
    for kind in ("denied", "invalid", "timeout", "unreachable", "tooLarge", "budget", "notRecorded"):
        write(tmp_path, f"{kind}.yaml", PARENT + f"""
egress:
- request: {{method: GET, url: "https://dns.example/api/zones/a.", credential: pdns}}
  error: {{{kind}: "the {kind} message"}}
""")
        write(tmp_path, f"{kind}.expected.yaml", f"status: {{error: {kind}, message: the {kind} message}}\nneedsFinalizer: false\n")
    assert check_fixtures(Zones(), tmp_path) == 7


def test_bodies_should_be_read_as_text_or_base64_both_ways():
    class Blob(Reconciler[dict]):
        def manifest(self) -> Manifest:
            return Manifest("blob", CONFIG_MAP)

        def reconcile(self, request, ctx) -> Outcome:
            answer = ctx.http("PUT", "https://blobs.example/b", body=b"\x00\xff\x10")
            return Outcome().set_status({"bytes": list(answer.body), "type": answer.header("CONTENT-TYPE")})

    cluster = FakeCluster(egress=[{
        "request": {"method": "PUT", "url": "https://blobs.example/b", "body": {"base64": "AP8Q"}},
        "response": {"status": 200, "headers": {"Content-Type": "application/octet-stream"},
                     "body": {"base64": "/wA="}},
    }])
    out = reconcile(Blob(), request(zone_parent()), cluster)
    assert out.status == {"bytes": [255, 0], "type": "application/octet-stream"}
    assert cluster.calls[0].body == b"\x00\xff\x10"

    with pytest.raises(ValueError, match=r"egress\[0\]\.response\.body\.base64"):
        FakeCluster(egress=[{"request": {"method": "GET", "url": "https://x/"},
                             "response": {"status": 200, "body": {"base64": "not base64!"}}}])


def test_json_should_be_sent_compact_with_its_content_type_and_read_back():
    cluster = FakeCluster(egress=[
        {"request": {"method": "GET", "url": f"{API}/a.", "credential": "pdns"}, "response": {"status": 404}},
        {"request": {"method": "POST", "url": API, "credential": "pdns",
                     "body": '{"name":"a.","kind":"Native"}'},
         "response": {"status": 201, "body": '{"serial": 3, "name": "a."}'}},
    ])
    out = reconcile(Zones(), request(zone_parent()), cluster)
    assert out.status == {"created": True, "serial": 3}
    post = cluster.calls[1]
    assert post.method == "POST" and post.body == b'{"name":"a.","kind":"Native"}'
    assert ("content-type", "application/json") in post.headers
    assert cluster.calls[0].headers == [("accept", "application/json")]


def test_a_call_not_recorded_should_fail_a_unit_test_whatever_the_guest_made_of_it():
    with pytest.raises(Unrecorded) as failed:
        reconcile(Zones(), request(zone_parent()), FakeCluster())  # no egress: every call is not recorded
    assert str(failed.value) == (
        "the guest made calls the fixture's `egress` does not hold: "
        'GET https://dns.example/api/zones/a. with credential "pdns"'
    )
    assert [describe(c) for c in failed.value.calls] == ['GET https://dns.example/api/zones/a. with credential "pdns"']


def test_each_reconcile_should_replay_the_recording_from_its_start():
    cluster = FakeCluster().record(Exchange(
        HttpRequest("GET", f"{API}/a.", credential="pdns"), HttpResponse(200, [], b'{"serial": 9}')
    ))
    for _ in range(2):
        assert reconcile(Zones(), request(zone_parent()), cluster).status == {"serial": 9, "server": None}
    assert len(cluster.calls) == 1


def test_an_http_error_the_reconciler_lets_escape_should_be_transient_naming_the_call():
    class Careless(Reconciler[dict]):
        def manifest(self) -> Manifest:
            return Manifest("careless", CONFIG_MAP)

        def reconcile(self, request, ctx) -> Outcome:
            ctx.http("get", "https://a.example/x", body="é")
            return Outcome()

    cluster = FakeCluster(egress=[{"request": {"method": "GET", "url": "https://a.example/x", "body": "é"},
                                   "error": {"timeout": "no answer in 10s"}}])
    with pytest.raises(Transient) as failed:
        reconcile(Careless(), request(zone_parent()), cluster)
    assert failed.value.message == "GET https://a.example/x (2 bytes of body): timeout: no answer in 10s"


def test_the_replay_should_take_the_first_unused_matching_exchange_and_compare_method_url_body_credential():
    get = {"method": "GET", "url": "https://a.example/x"}
    replay = Replay([
        Exchange.parse({"request": get, "response": {"status": 200, "body": "first"}}),
        Exchange.parse({"request": {**get, "credential": "c"}, "response": {"status": 200, "body": "credential"}}),
        Exchange.parse({"request": get, "response": {"status": 200, "body": "second"}}),
        Exchange.parse({"request": {**get, "body": "b"}, "response": {"status": 200, "body": "body"}}),
    ])
    ask = HttpRequest("Get", "https://a.example/x", headers=[("user-agent", "x")], timeout_ms=5)
    assert replay.fetch(ask).text() == "first"
    assert replay.fetch(ask).text() == "second"
    assert replay.fetch(HttpRequest("GET", "https://a.example/x", body=b"b")).text() == "body"
    assert replay.fetch(HttpRequest("GET", "https://a.example/x", credential="c")).text() == "credential"
    assert replay.verdict() is None
    with pytest.raises(HttpError) as missed:
        replay.fetch(HttpRequest("GET", "https://a.example/x/"))
    assert missed.value.kind == "notRecorded"
    assert missed.value.message.startswith("GET https://a.example/x/ is not in the recording (it holds: GET https")
    with pytest.raises(HttpError, match=r"^notRecorded: DELETE https://b/ is not in the recording \(it holds no calls\)$"):
        Replay().fetch(HttpRequest("DELETE", "https://b/"))
    # An empty body and no body are the same call.
    assert Replay([Exchange.parse({"request": {**get, "body": ""}, "response": {"status": 204}})]).fetch(
        HttpRequest("GET", "https://a.example/x")).status == 204


def test_the_http_api_should_check_its_arguments_and_read_answers():
    seen: list[HttpRequest] = []

    class Probe(Reconciler[dict]):
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def manifest(self) -> Manifest:
            return Manifest("probe", CONFIG_MAP)

        def reconcile(self, request, ctx) -> Outcome:
            ctx.http("post", "https://a.example/", **self.kwargs)
            return Outcome()

    class Recording(FakeCluster):
        def fetch(self, request: HttpRequest) -> HttpResponse:
            seen.append(request)
            return HttpResponse(204)

    reconcile(Probe(headers=[("X-A", "1"), ("X-A", "2")], body="hé", timeout_ms=250), request(zone_parent()),
              Recording())
    assert seen[-1] == HttpRequest("POST", "https://a.example/", [("X-A", "1"), ("X-A", "2")], "hé".encode(), None, 250)
    reconcile(Probe(json=[1], headers={"Content-Type": "application/merge-patch+json"}), request(zone_parent()),
              Recording())
    assert seen[-1].headers == [("Content-Type", "application/merge-patch+json")] and seen[-1].body == b"[1]"
    with pytest.raises(ValueError, match="body or json, not both"):
        reconcile(Probe(body="a", json={}), request(zone_parent()), Recording())
    with pytest.raises(TypeError, match="headers"):
        reconcile(Probe(headers={"a": 1}), request(zone_parent()), Recording())
    with pytest.raises(ValueError, match="timeout_ms"):
        reconcile(Probe(timeout_ms=-1), request(zone_parent()), Recording())

    answer = HttpResponse(503, [("Retry-After", "5"), ("retry-after", "6")], b'{"x": [1]}')
    assert (answer.ok, answer.header("retry-after"), answer.header("missing"), answer.json(), answer.text()) == (
        False, "5", None, {"x": [1]}, '{"x": [1]}')
    error = HttpError("tooLarge", "over 1 MiB")
    assert (error.kind, error.message, str(error)) == ("tooLarge", "over 1 MiB", "tooLarge: over 1 MiB")
    with pytest.raises(ValueError):
        HttpError("teapot", "no")


def test_admission_should_not_call_out():
    class Checker(Reconciler[dict]):
        def manifest(self) -> Manifest:
            return Manifest("checker", CONFIG_MAP)

        def reconcile(self, request, ctx) -> Outcome:
            return Outcome()

        def mutate(self, review, ctx):
            try:
                ctx.http("GET", "https://a.example/")
            except HttpError as error:
                return {**review.object, "data": {"kind": error.kind, "message": error.message}}

    cluster = FakeCluster(egress=[{"request": {"method": "GET", "url": "https://a.example/"},
                                   "response": {"status": 200}}])
    patched = mutate(Checker(), review("create", zone_parent()), cluster)
    assert patched["data"] == {"kind": "denied", "message": "only reconcile may call out (admission and conversion may not)"}


def test_a_malformed_egress_should_make_the_fixture_invalid(tmp_path: Path):
    write(tmp_path, "bad.yaml", PARENT + """
egress:
- request: {method: GET, url: "https://a.example/", headerz: {}}
  response: {status: 200}
""")
    write(tmp_path, "bad.expected.yaml", "status: {}\n")
    write(tmp_path, "kind.yaml", PARENT + """
egress:
- request: {method: GET, url: "https://a.example/"}
  error: {teapot: short and stout}
""")
    write(tmp_path, "kind.expected.yaml", "status: {}\n")
    with pytest.raises(AssertionError) as failed:
        check_fixtures(Zones(), tmp_path)
    assert "bad: egress[0].request: unknown keys ['headerz']" in str(failed.value)
    assert "kind: egress[0].error: one of denied, invalid, timeout" in str(failed.value)
