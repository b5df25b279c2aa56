//! Every ScheduledScale fixture (`guest-examples/scheduledscale/fixtures`,
//! shared by every language's example), natively. `OPERON_BLESS=1`
//! rewrites the expected files (review them before keeping them).

#[test]
fn fixtures_should_match_their_expected_outcomes() {
    operon_sdk::testing::fixtures::check_dir::<rust_scheduledscale::ScheduledScaleReconciler>(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scheduledscale/fixtures"
    ));
}
