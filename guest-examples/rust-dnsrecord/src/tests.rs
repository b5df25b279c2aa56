//! The reconcile logic, natively through the SDK's testing path (the same
//! code the component runs), with PowerDNS's answers recorded
//! (`FakeCluster::with_egress`). The shared fixtures cover whole scenarios;
//! these tests pin single rules.

use super::*;
use operon_sdk::testing::{self, FakeCluster, Reconciled};
use operon_sdk::{Exchange, HttpError, HttpRequest, HttpResponse};
use serde_json::{Value, json};

const SERVER: &str = "http://127.0.0.1:8081";
const ZONE_URL: &str = "http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.org.";
const NOW: &str = "2026-11-26T09:00:00.000Z";

fn spec() -> Value {
    json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": ["192.0.2.1", "192.0.2.2"]})
}

fn dnsrecord(spec: Value, status: Option<Value>) -> Value {
    let mut object = json!({
        "apiVersion": "dns.example.operon.dev/v1alpha1",
        "kind": "DnsRecord",
        "metadata": {
            "name": "www",
            "namespace": "default",
            "uid": "5b9e0c1a-0000-4d2e-9f3a-000000000001",
            "generation": 2,
            "creationTimestamp": "2026-11-26T08:00:00Z",
        },
        "spec": spec,
    });
    if let Some(status) = status {
        object["status"] = status;
    }
    object
}

/// The GET of the rrset `name` `rtype`.
fn get(name: &str, rtype: &str) -> HttpRequest {
    HttpRequest::get(format!("{ZONE_URL}?rrset_name={name}&rrset_type={rtype}")).credential(CREDENTIAL)
}

/// A PATCH of the zone with `body`.
fn patch(body: &str) -> HttpRequest {
    HttpRequest::patch(ZONE_URL).body(body.as_bytes().to_vec()).credential(CREDENTIAL)
}

/// PowerDNS's answer to a GET: the zone with these rrsets.
fn zone(rrsets: Value) -> Result<HttpResponse, HttpError> {
    let body = json!({"name": "example.org.", "kind": "Native", "rrsets": rrsets});
    Ok(HttpResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    })
}

fn answer(status: u16, body: &str) -> Result<HttpResponse, HttpError> {
    Ok(HttpResponse { status, headers: vec![], body: body.as_bytes().to_vec() })
}

const REPLACE_WWW: &str = r#"{"rrsets":[{"name":"www.example.org.","type":"A","ttl":300,"changetype":"REPLACE","records":[{"content":"192.0.2.1","disabled":false},{"content":"192.0.2.2","disabled":false}]}]}"#;
const DELETE_WWW: &str = r#"{"rrsets":[{"name":"www.example.org.","type":"A","changetype":"DELETE"}]}"#;

/// Runs the reconciler with these exchanges; fails the test when it made a
/// call they do not hold.
fn run(
    object: Value,
    finalizing: bool,
    exchanges: Vec<(HttpRequest, Result<HttpResponse, HttpError>)>,
) -> Result<Reconciled, Failure> {
    let cluster = FakeCluster::new()
        .with_egress(exchanges.into_iter().map(|(request, answer)| Exchange::of(request, &answer)).collect());
    let request = testing::request(object).now(NOW).finalizing(finalizing).build::<DnsRecordReconciler>();
    let result = testing::reconcile::<DnsRecordReconciler>(&cluster, request);
    assert_eq!(cluster.unrecorded_calls(), None);
    result
}

fn ready(status: &Value) -> (&str, &str, &str) {
    let condition = &status["conditions"][0];
    assert_eq!(condition["type"], "Ready");
    (
        condition["status"].as_str().unwrap(),
        condition["reason"].as_str().unwrap(),
        condition["message"].as_str().unwrap(),
    )
}

#[test]
fn the_manifest_should_own_nothing_and_name_the_finalizer() {
    let manifest = DnsRecordReconciler::manifest();
    assert_eq!(manifest.name(), "dnsrecord");
    assert_eq!(manifest.for_kind().to_string(), DnsRecord::gvk().to_string());
    assert!(manifest.owned().is_empty());
    assert_eq!(manifest.finalizer_name(), Some("dns.example.operon.dev/record"));
}

#[test]
fn a_name_should_be_relative_to_the_zone_absolute_with_a_dot_or_the_apex_as_at() {
    let fqdn = |name: &str, zone: &str| {
        let mut s = spec();
        s["name"] = json!(name);
        s["zone"] = json!(zone);
        Record::parse(&s).map(|r| (r.zone, r.fqdn))
    };
    assert_eq!(fqdn("www", "example.org"), Ok(("example.org.".into(), "www.example.org.".into())));
    assert_eq!(fqdn("a.b", "example.org."), Ok(("example.org.".into(), "a.b.example.org.".into())));
    assert_eq!(fqdn("www.example.org.", "example.org."), Ok(("example.org.".into(), "www.example.org.".into())));
    assert_eq!(fqdn("@", "example.org."), Ok(("example.org.".into(), "example.org.".into())));
    assert_eq!(fqdn("*.apps", "example.org."), Ok(("example.org.".into(), "*.apps.example.org.".into())));
    assert_eq!(
        fqdn("_acme-challenge", "example.org."),
        Ok(("example.org.".into(), "_acme-challenge.example.org.".into()))
    );
    assert_eq!(
        fqdn("www.example.com.", "example.org."),
        Err("spec.name www.example.com. is not in zone example.org.".into())
    );
    assert_eq!(
        fqdn("notexample.org.", "example.org."),
        Err("spec.name notexample.org. is not in zone example.org.".into())
    );
    assert!(fqdn("WWW", "example.org.").unwrap_err().starts_with("spec.name \"WWW\" is not a DNS name"));
    assert!(fqdn("a..b", "example.org.").is_err());
    assert!(fqdn("-a", "example.org.").is_err());
    assert!(fqdn("www", "*.example.org.").unwrap_err().starts_with("spec.zone \"*.example.org.\""));
}

#[test]
fn contents_should_be_written_as_powerdns_wants_them() {
    let contents = |rtype: &str, records: Value| {
        let mut s = spec();
        s["type"] = json!(rtype);
        s["records"] = records;
        Record::parse(&s).map(|r| r.contents)
    };
    assert_eq!(contents("AAAA", json!(["2001:DB8::1"])), Ok(vec!["2001:DB8::1".to_string()]), "as written");
    assert_eq!(contents("CNAME", json!(["target.example.com"])), Ok(vec!["target.example.com.".to_string()]));
    assert_eq!(contents("CNAME", json!(["target.example.com."])), Ok(vec!["target.example.com.".to_string()]));
    assert_eq!(
        contents("TXT", json!(["v=spf1 -all", r#"say "hi" \o/"#])),
        Ok(vec![r#""v=spf1 -all""#.to_string(), r#""say \"hi\" \\o/""#.to_string()])
    );
}

#[test]
fn an_invalid_spec_should_say_what_is_wrong() {
    let cases = [
        (json!(null), "spec must be an object"),
        (json!({"zone": "example.org."}), "spec.server must be set"),
        (
            json!({"server": "ftp://pdns", "zone": "example.org."}),
            "spec.server must be the PowerDNS API's base URL, such as http://127.0.0.1:8081, not \"ftp://pdns\"",
        ),
        (
            json!({"server": "http://pdns:99999"}),
            "spec.server must be the PowerDNS API's base URL, such as http://127.0.0.1:8081, not \"http://pdns:99999\"",
        ),
        (json!({"server": SERVER, "zone": 7}), "spec.zone must be a string"),
        (json!({"server": SERVER, "zone": "example.org.", "name": "www"}), "spec.type must be set"),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "MX"}),
            "spec.type must be one of A, AAAA, CNAME, TXT, not \"MX\"",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "ttl": 0, "records": ["192.0.2.1"]}),
            "spec.ttl must be a whole number from 1 to 2147483647, not 0",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "ttl": "300", "records": ["192.0.2.1"]}),
            "spec.ttl must be a whole number from 1 to 2147483647, not \"300\"",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": []}),
            "spec.records must hold at least one record",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": "192.0.2.1"}),
            "spec.records must be a list of strings",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": [1]}),
            "spec.records[0] must be a string",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "A", "records": ["192.0.2.300"]}),
            "spec.records[0] \"192.0.2.300\" is not an IPv4 address",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "AAAA", "records": ["192.0.2.1"]}),
            "spec.records[0] \"192.0.2.1\" is not an IPv6 address",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "AAAA", "records": ["2001:db8::1", "2001:DB8:0::1"]}),
            "spec.records[1] \"2001:DB8:0::1\" is listed twice",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "CNAME", "records": ["a.example.", "b.example."]}),
            "spec.records must hold exactly one record for a CNAME, not 2",
        ),
        (
            json!({"server": SERVER, "zone": "example.org.", "name": "www", "type": "TXT", "records": ["caf\u{e9}"]}),
            "spec.records[0] \"caf\u{e9}\" is not 1 to 255 printable ASCII characters",
        ),
    ];
    for (spec, message) in cases {
        assert_eq!(Record::parse(&spec), Err(message.to_string()), "{spec}");
    }
    let failure = run(dnsrecord(json!({"server": SERVER}), None), false, vec![]).unwrap_err();
    assert!(failure.is_terminal());
    assert_eq!(failure.message(), "spec.zone must be set");
    assert_eq!(ready(failure.status().unwrap()), ("False", "InvalidSpec", "spec.zone must be set"));
}

#[test]
fn patch_bodies_should_be_compact_json_with_fields_in_a_fixed_order() {
    let record = Record::parse(&spec()).unwrap();
    assert_eq!(String::from_utf8(pdns::replace_body(&record)).unwrap(), REPLACE_WWW);
    assert_eq!(String::from_utf8(pdns::delete_body(&Target::of(&record))).unwrap(), DELETE_WWW);
}

#[test]
fn a_missing_rrset_should_be_created_and_the_status_say_where() {
    let out = run(
        dnsrecord(spec(), None),
        false,
        vec![(get("www.example.org.", "A"), zone(json!([]))), (patch(REPLACE_WWW), answer(204, ""))],
    )
    .unwrap();
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].reason, "Created");
    assert_eq!(out.events[0].message, "created www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300) in zone example.org.");
    let status = out.status.unwrap();
    assert_eq!(
        status,
        json!({
            "observedGeneration": 2,
            "server": SERVER, "zone": "example.org.", "fqdn": "www.example.org.", "type": "A",
            "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2, "lastTransitionTime": NOW,
                            "reason": "Synced", "message": "www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300)"}],
        })
    );
    assert!(out.needs_finalizer);
    assert_eq!(out.requeue_after, Some(std::time::Duration::from_secs(300)));
}

#[test]
fn an_rrset_in_sync_should_not_be_written_even_spelled_otherwise() {
    let mut s = spec();
    s["type"] = json!("AAAA");
    s["records"] = json!(["2001:DB8:0::1", "2001:db8::2"]);
    let previous =
        json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]});
    let rrset = json!([{"name": "www.example.org.", "type": "AAAA", "ttl": 300,
                        "records": [{"content": "2001:db8::2", "disabled": false}, {"content": "2001:db8::1", "disabled": false}]}]);
    let out = run(dnsrecord(s, Some(previous)), false, vec![(get("www.example.org.", "AAAA"), zone(rrset))]).unwrap();
    assert!(out.events.is_empty(), "nothing written, nothing to say");
    let status = out.status.unwrap();
    assert_eq!(status["conditions"][0]["lastTransitionTime"], "2026-11-01T00:00:00Z", "kept while it holds");
}

#[test]
fn a_drifted_rrset_should_be_put_back() {
    let cases = [
        json!([{"name": "www.example.org.", "type": "A", "ttl": 300, "records": [{"content": "192.0.2.1", "disabled": false}]}]),
        json!([{"name": "www.example.org.", "type": "A", "ttl": 60, "records": [
            {"content": "192.0.2.1", "disabled": false}, {"content": "192.0.2.2", "disabled": false}]}]),
        json!([{"name": "www.example.org.", "type": "A", "ttl": 300, "records": [
            {"content": "192.0.2.1", "disabled": false}, {"content": "192.0.2.2", "disabled": true}]}]),
    ];
    for rrset in cases {
        let out = run(
            dnsrecord(spec(), None),
            false,
            vec![(get("www.example.org.", "A"), zone(rrset.clone())), (patch(REPLACE_WWW), answer(204, ""))],
        )
        .unwrap();
        assert_eq!(out.events[0].reason, "Updated", "{rrset}");
    }
    let out = run(
        dnsrecord(spec(), None),
        false,
        vec![(get("www.example.org.", "A"), zone(cases_first())), (patch(REPLACE_WWW), answer(204, ""))],
    )
    .unwrap();
    assert_eq!(
        out.events[0].message,
        "updated www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300); it was 192.0.2.1 (ttl 300)"
    );
}

fn cases_first() -> Value {
    json!([{"name": "www.example.org.", "type": "A", "ttl": 300, "records": [{"content": "192.0.2.1", "disabled": false}]}])
}

#[test]
fn a_call_the_host_denies_should_be_terminal_and_name_the_grant() {
    let failure = run(
        dnsrecord(spec(), None),
        false,
        vec![(get("www.example.org.", "A"), Err(HttpError::Denied("127.0.0.1:8081 is not granted".into())))],
    )
    .unwrap_err();
    assert!(failure.is_terminal());
    assert_eq!(
        failure.message(),
        "the host denied the call to PowerDNS at http://127.0.0.1:8081 (127.0.0.1:8081 is not granted): the \
         Reconciler must grant egress to http://127.0.0.1:8081 for GET and PATCH under \
         /api/v1/servers/localhost/zones/, and credential pdns for host 127.0.0.1"
    );
    assert_eq!(ready(failure.status().unwrap()).1, "EgressDenied");
}

#[test]
fn powerdns_down_or_slow_should_be_transient_and_keep_what_is_published() {
    let published = json!({"server": SERVER, "zone": "example.org.", "fqdn": "www.example.org.", "type": "A",
                           "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-01T00:00:00Z"}]});
    for error in [HttpError::Unreachable("connection refused".into()), HttpError::Timeout("no answer in 5s".into())] {
        let failure = run(
            dnsrecord(spec(), Some(published.clone())),
            false,
            vec![(get("www.example.org.", "A"), Err(error.clone()))],
        )
        .unwrap_err();
        assert!(!failure.is_terminal());
        let kind = error.kind();
        let status = failure.status().unwrap();
        assert_eq!(ready(status).1, "ServerUnavailable");
        assert!(failure.message().starts_with(&format!("PowerDNS at http://127.0.0.1:8081 is unavailable ({kind}: ")));
        assert_eq!(status["fqdn"], "www.example.org.", "still published");
        assert_eq!(status["conditions"][0]["lastTransitionTime"], NOW, "turned False now");
    }
}

#[test]
fn answers_should_be_read_by_their_status() {
    let cases: [(u16, &str, bool, &str, &str); 4] = [
        (
            404,
            "Not Found",
            true,
            "ZoneNotFound",
            "zone example.org. does not exist on PowerDNS at http://127.0.0.1:8081",
        ),
        (
            401,
            "Unauthorized",
            false,
            "Unauthorized",
            "PowerDNS at http://127.0.0.1:8081 refused the credential pdns (401): check the API key in the \
             Secret that the Reconciler's credential pdns names",
        ),
        (
            500,
            r#"{"error": "Backend error"}"#,
            false,
            "ServerError",
            "PowerDNS at http://127.0.0.1:8081 answered 500: Backend error",
        ),
        (502, "", false, "ServerError", "PowerDNS at http://127.0.0.1:8081 answered 502"),
    ];
    for (code, body, terminal, reason, message) in cases {
        let failure =
            run(dnsrecord(spec(), None), false, vec![(get("www.example.org.", "A"), answer(code, body))]).unwrap_err();
        assert_eq!(failure.is_terminal(), terminal, "{code}");
        assert_eq!(failure.message(), message);
        assert_eq!(ready(failure.status().unwrap()), ("False", reason, message));
    }
    let failure = run(
        dnsrecord(spec(), None),
        false,
        vec![
            (get("www.example.org.", "A"), zone(json!([]))),
            (
                patch(REPLACE_WWW),
                answer(422, r#"{"error": "RRset www.example.org. IN A: Conflicts with pre-existing RRset"}"#),
            ),
        ],
    )
    .unwrap_err();
    assert!(failure.is_terminal());
    assert_eq!(
        failure.message(),
        "PowerDNS at http://127.0.0.1:8081 refused www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300): RRset \
         www.example.org. IN A: Conflicts with pre-existing RRset"
    );
}

#[test]
fn a_moved_record_should_delete_the_one_published_before() {
    let published = json!({"server": SERVER, "zone": "example.org.", "fqdn": "old.example.org.", "type": "A"});
    let delete_old = r#"{"rrsets":[{"name":"old.example.org.","type":"A","changetype":"DELETE"}]}"#;
    let out = run(
        dnsrecord(spec(), Some(published)),
        false,
        vec![
            (patch(delete_old), answer(204, "")),
            (get("www.example.org.", "A"), zone(json!([]))),
            (patch(REPLACE_WWW), answer(204, "")),
        ],
    )
    .unwrap();
    let reasons: Vec<&str> = out.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["Removed", "Created"]);
    assert_eq!(out.status.unwrap()["fqdn"], "www.example.org.");
}

#[test]
fn deletion_should_delete_the_rrset_then_let_go() {
    let published = json!({"server": SERVER, "zone": "example.org.", "fqdn": "www.example.org.", "type": "A"});
    let out =
        run(dnsrecord(spec(), Some(published.clone())), true, vec![(patch(DELETE_WWW), answer(204, ""))]).unwrap();
    assert!(out.finalized);
    assert!(!out.needs_finalizer);
    assert_eq!(out.status, None);
    assert_eq!(out.events[0].message, "deleted www.example.org. A from zone example.org.");

    let gone =
        run(dnsrecord(spec(), Some(published.clone())), true, vec![(patch(DELETE_WWW), answer(404, "Not Found"))])
            .unwrap();
    assert!(gone.finalized && gone.events.is_empty(), "a zone that is gone has nothing to delete");

    let down = run(
        dnsrecord(spec(), Some(published.clone())),
        true,
        vec![(patch(DELETE_WWW), Err(HttpError::Unreachable("refused".into())))],
    )
    .unwrap_err();
    assert!(!down.is_terminal(), "the finalizer stays until PowerDNS is back");

    // An invalid spec deletes what the status says is published; with none, nothing.
    let invalid = run(dnsrecord(json!({}), Some(published)), true, vec![(patch(DELETE_WWW), answer(204, ""))]).unwrap();
    assert!(invalid.finalized);
    assert!(run(dnsrecord(json!({}), None), true, vec![]).unwrap().finalized);
}

#[test]
fn a_base_url_should_be_read_as_a_grant_names_it() {
    assert_eq!(spec::endpoint("http://127.0.0.1:8081"), ("http", "127.0.0.1".into(), 8081, String::new()));
    assert_eq!(
        spec::endpoint("https://dns.example.com/pdns"),
        ("https", "dns.example.com".into(), 443, "/pdns".into())
    );
    assert_eq!(spec::endpoint("http://[::1]:8081/"), ("http", "::1".into(), 8081, String::new()));
    for bad in ["127.0.0.1:8081", "http://", "http://a b", "http://u@h", "http://h?x=1", "http://h:0", "http://[::1"] {
        assert!(!spec::is_base_url(bad), "{bad}");
    }
    let mut s = spec();
    s["server"] = json!("http://127.0.0.1:8081///");
    assert_eq!(Record::parse(&s).unwrap().server, SERVER, "trailing slashes dropped");
}
