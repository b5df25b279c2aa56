//! Every DnsRecord fixture (`guest-examples/dnsrecord/fixtures`, shared by
//! every language's example, with the PowerDNS calls each makes recorded)
//! through the native path of the component. `OPERON_BLESS=1` rewrites the
//! expected files (review them before keeping them).

#[test]
fn fixtures_should_match_their_expected_outcomes() {
    operon_sdk::testing::fixtures::check_dir::<rust_dnsrecord::DnsRecordReconciler>(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dnsrecord/fixtures"
    ));
}

/// Fixtures recorded from a live run against a real PowerDNS (`operon run
/// --record`, host/tests/all/egress.rs with `OPERON_KEEP_RECORDINGS`): the
/// calls and answers of that run, replayed.
#[test]
fn fixtures_recorded_from_a_live_run_should_replay() {
    operon_sdk::testing::fixtures::check_dir::<rust_dnsrecord::DnsRecordReconciler>(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dnsrecord/fixtures/recorded"
    ));
}
