"""The DnsRecord reconciler natively, through the SDK's testing path (the same
code the component runs), with PowerDNS's answers recorded
(``FakeCluster(egress=...)``). The shared fixtures cover whole scenarios;
these tests pin single rules, as rust-dnsrecord's do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnsrecord import DnsRecordReconciler, Record, Target, pdns, spec
from operon_sdk import Terminal, Transient
from operon_sdk.testing import FakeCluster, check_fixtures, reconcile, request

FIXTURES = Path(__file__).parent.parent.parent / "dnsrecord" / "fixtures"
SERVER = "http://127.0.0.1:8081"
ZONE_URL = "http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org."
NOW = "2026-11-26T09:00:00.000Z"
SPEC = {"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": ["192.0.2.1", "192.0.2.2"]}
REPLACE_WWW = (
    '{"rrsets":[{"name":"www.example.org.","type":"A","ttl":300,"changetype":"REPLACE",'
    '"records":[{"content":"192.0.2.1","disabled":false},{"content":"192.0.2.2","disabled":false}]}]}'
)
DELETE_WWW = '{"rrsets":[{"name":"www.example.org.","type":"A","changetype":"DELETE"}]}'
PUBLISHED = {"server": SERVER, "zone": "example.org.", "fqdn": "www.example.org.", "type": "A"}


def dnsrecord(spec_: dict | None = None, status: dict | None = None) -> dict:
    obj = {
        "apiVersion": "dns.example.operon.dev/v1alpha1",
        "kind": "DnsRecord",
        "metadata": {
            "name": "www",
            "namespace": "default",
            "uid": "5b9e0c1a-0000-4d2e-9f3a-000000000001",
            "generation": 2,
            "creationTimestamp": "2026-11-26T08:00:00Z",
        },
        "spec": SPEC if spec_ is None else spec_,
    }
    if status is not None:
        obj["status"] = status
    return obj


def get(name: str, rtype: str) -> dict:
    return {"method": "GET", "url": f"{ZONE_URL}?rrset_name={name}&rrset_type={rtype}", "credential": "pdns"}


def patch(body: str) -> dict:
    return {"method": "PATCH", "url": ZONE_URL, "body": body, "credential": "pdns"}


def zone(rrsets: list) -> dict:
    return {"status": 200, "headers": {"content-type": "application/json"},
            "body": json.dumps({"name": "example.org.", "kind": "Native", "rrsets": rrsets})}


def answer(status: int, body: str = "") -> dict:
    return {"status": status, "body": body} if body else {"status": status}


def run(obj: dict, exchanges: list[tuple[dict, dict]], finalizing: bool = False):
    egress = [{"request": r, **({"error": a["error"]} if "error" in a else {"response": a})} for r, a in exchanges]
    cluster = FakeCluster(egress=egress)
    return reconcile(DnsRecordReconciler(), request(obj, finalizing=finalizing, now=NOW), cluster)


def ready(status: dict) -> tuple[str, str, str]:
    condition = status["conditions"][0]
    assert condition["type"] == "Ready"
    return condition["status"], condition["reason"], condition["message"]


def test_shared_fixtures_should_pass_natively():
    # Every fixture, those recorded from a live run in `recorded/` too.
    cases = [p for p in FIXTURES.rglob("*.yaml") if ".expected." not in p.name]
    assert check_fixtures(DnsRecordReconciler(), FIXTURES) == len(cases) == 17 + 6


def test_fixtures_recorded_from_a_live_run_should_replay_natively():
    # `operon run --record` of the Rust module against a real PowerDNS
    # (host/tests/egress.rs): the Python module makes the same calls.
    assert check_fixtures(DnsRecordReconciler(), FIXTURES / "recorded") == 6


def test_the_manifest_should_own_nothing_and_name_the_finalizer():
    m = DnsRecordReconciler().manifest()
    assert m.name == "dnsrecord"
    assert str(m.for_kind) == "dns.example.operon.dev/v1alpha1 DnsRecord"
    assert m.owns == []
    assert m.finalizer == "dns.example.operon.dev/record"


@pytest.mark.parametrize(
    ("name", "zone_", "fqdn"),
    [
        ("www", "example.org", "www.example.org."),
        ("a.b", "example.org.", "a.b.example.org."),
        ("www.example.org.", "example.org.", "www.example.org."),
        ("@", "example.org.", "example.org."),
        ("*.apps", "example.org.", "*.apps.example.org."),
        ("_acme-challenge", "example.org.", "_acme-challenge.example.org."),
    ],
)
def test_a_name_should_be_relative_to_the_zone_absolute_with_a_dot_or_the_apex_as_at(name, zone_, fqdn):
    record = spec.parse({**SPEC, "name": name, "zone": zone_})
    assert (record.zone, record.fqdn) == ("example.org.", fqdn)


@pytest.mark.parametrize(
    ("rtype", "records", "contents"),
    [
        ("AAAA", ["2001:DB8::1"], ("2001:DB8::1",)),
        ("CNAME", ["target.example.com"], ("target.example.com.",)),
        ("CNAME", ["target.example.com."], ("target.example.com.",)),
        ("TXT", ["v=spf1 -all", 'say "hi" \\o/'], ('"v=spf1 -all"', '"say \\"hi\\" \\\\o/"')),
    ],
)
def test_contents_should_be_written_as_powerdns_wants_them(rtype, records, contents):
    assert spec.parse({**SPEC, "type": rtype, "records": records}).contents == contents


S = {"server": SERVER, "zone": "example.org.", "name": "www"}


@pytest.mark.parametrize(
    ("spec_", "message"),
    [
        (None, "spec must be an object"),
        ({"zone": "example.org."}, "spec.server must be set"),
        (
            {"server": "ftp://pdns", "zone": "example.org."},
            'spec.server must be the PowerDNS API\'s base URL, such as http://127.0.0.1:8081, not "ftp://pdns"',
        ),
        (
            {"server": "http://pdns:99999"},
            'spec.server must be the PowerDNS API\'s base URL, such as http://127.0.0.1:8081, not "http://pdns:99999"',
        ),
        ({"server": SERVER, "zone": 7}, "spec.zone must be a string"),
        ({**S, "name": "www.example.com."}, "spec.name www.example.com. is not in zone example.org."),
        ({**S, "name": "notexample.org."}, "spec.name notexample.org. is not in zone example.org."),
        (
            {**S, "name": "WWW"},
            'spec.name "WWW" is not a DNS name: www (in the zone), www.example.org. (absolute) or @ (the zone itself)',
        ),
        (
            {**S, "zone": "*.example.org."},
            'spec.zone "*.example.org." is not a DNS name such as example.org. (lowercase)',
        ),
        (S, "spec.type must be set"),
        ({**S, "type": "MX"}, 'spec.type must be one of A, AAAA, CNAME, TXT, not "MX"'),
        (
            {**S, "type": "A", "ttl": 0, "records": ["192.0.2.1"]},
            "spec.ttl must be a whole number from 1 to 2147483647, not 0",
        ),
        (
            {**S, "type": "A", "ttl": "300", "records": ["192.0.2.1"]},
            'spec.ttl must be a whole number from 1 to 2147483647, not "300"',
        ),
        (
            {**S, "type": "A", "ttl": True, "records": ["192.0.2.1"]},
            "spec.ttl must be a whole number from 1 to 2147483647, not true",
        ),
        ({**S, "type": "A", "records": []}, "spec.records must hold at least one record"),
        ({**S, "type": "A", "records": "192.0.2.1"}, "spec.records must be a list of strings"),
        ({**S, "type": "A", "records": [1]}, "spec.records[0] must be a string"),
        ({**S, "type": "A", "records": ["192.0.2.300"]}, 'spec.records[0] "192.0.2.300" is not an IPv4 address'),
        ({**S, "type": "AAAA", "records": ["192.0.2.1"]}, 'spec.records[0] "192.0.2.1" is not an IPv6 address'),
        ({**S, "type": "AAAA", "records": ["fe80::1%eth0"]}, 'spec.records[0] "fe80::1%eth0" is not an IPv6 address'),
        (
            {**S, "type": "AAAA", "records": ["2001:db8::1", "2001:DB8:0::1"]},
            'spec.records[1] "2001:DB8:0::1" is listed twice',
        ),
        (
            {**S, "type": "CNAME", "records": ["a.example.", "b.example."]},
            "spec.records must hold exactly one record for a CNAME, not 2",
        ),
        (
            {**S, "type": "TXT", "records": ["café"]},
            'spec.records[0] "café" is not 1 to 255 printable ASCII characters',
        ),
    ],
)
def test_an_invalid_spec_should_say_what_is_wrong(spec_, message):
    with pytest.raises(spec.InvalidSpec) as error:
        spec.parse(spec_)
    assert str(error.value) == message


def test_an_invalid_spec_should_be_terminal_with_a_status():
    with pytest.raises(Terminal) as failure:
        run(dnsrecord({"server": SERVER}), [])
    assert failure.value.message == "spec.zone must be set"
    assert ready(failure.value.status) == ("False", "InvalidSpec", "spec.zone must be set")


def test_patch_bodies_should_be_compact_json_with_fields_in_a_fixed_order():
    record = spec.parse(SPEC)
    assert pdns.replace_body(record).decode() == REPLACE_WWW
    assert pdns.delete_body(Target.of(record)).decode() == DELETE_WWW


def test_a_missing_rrset_should_be_created_and_the_status_say_where():
    out = run(dnsrecord(), [(get("www.example.org.", "A"), zone([])), (patch(REPLACE_WWW), answer(204))])
    assert [(e.reason, e.message) for e in out.events] == [
        ("Created", "created www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300) in zone example.org.")
    ]
    assert out.status == {
        "observedGeneration": 2,
        **PUBLISHED,
        "conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 2, "lastTransitionTime": NOW,
             "reason": "Synced", "message": "www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300)"}
        ],
    }
    assert out.needs_finalizer
    assert out.requeue_after_ms == 300_000


def test_an_rrset_in_sync_should_not_be_written_even_spelled_otherwise():
    previous = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
    rrset = [{"name": "www.example.org.", "type": "AAAA", "ttl": 300,
              "records": [{"content": "2001:db8::2"}, {"content": "2001:db8::1", "disabled": False}]}]
    obj = dnsrecord({**SPEC, "type": "AAAA", "records": ["2001:DB8:0::1", "2001:db8::2"]}, previous)
    out = run(obj, [(get("www.example.org.", "AAAA"), zone(rrset))])
    assert out.events == [], "nothing written, nothing to say"
    assert out.status["conditions"][0]["lastTransitionTime"] == "2026-11-01T00:00:00Z", "kept while it holds"


@pytest.mark.parametrize(
    "rrset",
    [
        {"ttl": 300, "records": [{"content": "192.0.2.1", "disabled": False}]},
        {"ttl": 60, "records": [{"content": "192.0.2.1", "disabled": False}, {"content": "192.0.2.2"}]},
        {"ttl": 300, "records": [{"content": "192.0.2.1"}, {"content": "192.0.2.2", "disabled": True}]},
    ],
)
def test_a_drifted_rrset_should_be_put_back(rrset):
    rrsets = [{"name": "www.example.org.", "type": "A", **rrset}]
    out = run(dnsrecord(), [(get("www.example.org.", "A"), zone(rrsets)), (patch(REPLACE_WWW), answer(204))])
    assert out.reasons == ["Updated"]


def test_an_update_should_say_what_was_there():
    rrsets = [{"name": "www.example.org.", "type": "A", "ttl": 300, "records": [{"content": "192.0.2.1"}]}]
    out = run(dnsrecord(), [(get("www.example.org.", "A"), zone(rrsets)), (patch(REPLACE_WWW), answer(204))])
    assert out.events[0].message == (
        "updated www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300); it was 192.0.2.1 (ttl 300)"
    )


def test_a_call_the_host_denies_should_be_terminal_and_name_the_grant():
    with pytest.raises(Terminal) as failure:
        run(dnsrecord(), [(get("www.example.org.", "A"), {"error": {"denied": "127.0.0.1:8081 is not granted"}})])
    assert failure.value.message == (
        "the host denied the call to PowerDNS at http://127.0.0.1:8081 (127.0.0.1:8081 is not granted): the "
        "Reconciler must grant egress to http://127.0.0.1:8081 for GET and PATCH under "
        "/api/v1/servers/localhost/zones/, and credential pdns for host 127.0.0.1"
    )
    assert ready(failure.value.status)[1] == "EgressDenied"


@pytest.mark.parametrize(("kind", "message"), [("unreachable", "connection refused"), ("timeout", "no answer in 5s")])
def test_powerdns_down_or_slow_should_be_transient_and_keep_what_is_published(kind, message):
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}
    previous = {**PUBLISHED, "conditions": [condition]}
    with pytest.raises(Transient) as failure:
        run(dnsrecord(status=previous), [(get("www.example.org.", "A"), {"error": {kind: message}})])
    assert failure.value.message == f"PowerDNS at http://127.0.0.1:8081 is unavailable ({kind}: {message})"
    status = failure.value.status
    assert ready(status)[1] == "ServerUnavailable"
    assert status["fqdn"] == "www.example.org.", "still published"
    assert status["conditions"][0]["lastTransitionTime"] == NOW, "turned False now"


@pytest.mark.parametrize(
    ("code", "body", "terminal", "reason", "message"),
    [
        (
            404,
            "Not Found",
            True,
            "ZoneNotFound",
            "zone example.org. does not exist on PowerDNS at http://127.0.0.1:8081",
        ),
        (
            401,
            "Unauthorized",
            False,
            "Unauthorized",
            "PowerDNS at http://127.0.0.1:8081 refused the credential pdns (401): check the API key in the "
            "Secret that the Reconciler's credential pdns names",
        ),
        (
            500,
            '{"error": "Backend error"}',
            False,
            "ServerError",
            "PowerDNS at http://127.0.0.1:8081 answered 500: Backend error",
        ),
        (502, "", False, "ServerError", "PowerDNS at http://127.0.0.1:8081 answered 502"),
    ],
)
def test_answers_should_be_read_by_their_status(code, body, terminal, reason, message):
    with pytest.raises(Terminal if terminal else Transient) as failure:
        run(dnsrecord(), [(get("www.example.org.", "A"), answer(code, body))])
    assert failure.value.message == message
    assert ready(failure.value.status) == ("False", reason, message)


def test_a_record_powerdns_refuses_should_be_terminal_with_its_reason():
    conflict = '{"error": "RRset www.example.org. IN A: Conflicts with pre-existing RRset"}'
    with pytest.raises(Terminal) as failure:
        run(dnsrecord(), [(get("www.example.org.", "A"), zone([])), (patch(REPLACE_WWW), answer(422, conflict))])
    assert failure.value.message == (
        "PowerDNS at http://127.0.0.1:8081 refused www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300): RRset "
        "www.example.org. IN A: Conflicts with pre-existing RRset"
    )


def test_a_moved_record_should_delete_the_one_published_before():
    old = {**PUBLISHED, "fqdn": "old.example.org."}
    delete_old = '{"rrsets":[{"name":"old.example.org.","type":"A","changetype":"DELETE"}]}'
    out = run(
        dnsrecord(status=old),
        [
            (patch(delete_old), answer(204)),
            (get("www.example.org.", "A"), zone([])),
            (patch(REPLACE_WWW), answer(204)),
        ],
    )
    assert out.reasons == ["Removed", "Created"]
    assert out.status["fqdn"] == "www.example.org."


def test_deletion_should_delete_the_rrset_then_let_go():
    out = run(dnsrecord(status=PUBLISHED), [(patch(DELETE_WWW), answer(204))], finalizing=True)
    assert out.finalized and not out.needs_finalizer and out.status is None
    assert out.events[0].message == "deleted www.example.org. A from zone example.org."

    gone = run(dnsrecord(status=PUBLISHED), [(patch(DELETE_WWW), answer(404, "Not Found"))], finalizing=True)
    assert gone.finalized and gone.events == [], "a zone that is gone has nothing to delete"

    with pytest.raises(Transient):
        run(dnsrecord(status=PUBLISHED), [(patch(DELETE_WWW), {"error": {"unreachable": "refused"}})], finalizing=True)

    # An invalid spec deletes what the status says is published; with none, nothing.
    assert run(dnsrecord({}, PUBLISHED), [(patch(DELETE_WWW), answer(204))], finalizing=True).finalized
    assert run(dnsrecord({}), [], finalizing=True).finalized


def test_a_base_url_should_be_read_as_a_grant_names_it():
    assert spec.endpoint("http://127.0.0.1:8081") == ("http", "127.0.0.1", 8081, "")
    assert spec.endpoint("https://dns.example.com/pdns") == ("https", "dns.example.com", 443, "/pdns")
    assert spec.endpoint("http://[::1]:8081/") == ("http", "::1", 8081, "")
    for bad in ["127.0.0.1:8081", "http://", "http://a b", "http://u@h", "http://h?x=1", "http://h:0", "http://[::1"]:
        assert not spec.is_base_url(bad), bad
    assert spec.parse({**SPEC, "server": "http://127.0.0.1:8081///"}).server == SERVER, "trailing slashes dropped"


def test_record_should_describe_itself():
    assert isinstance(spec.parse(SPEC), Record)
    assert spec.parse(SPEC).describe() == "www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300)"
