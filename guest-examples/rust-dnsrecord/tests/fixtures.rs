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
