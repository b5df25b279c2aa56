//! Every WebApp fixture (`guest-examples/webapp/fixtures`, shared by every
//! language's example) through the native path of the component:
//! the fixtures and the logic cannot drift apart. `OPERON_BLESS=1` rewrites
//! the expected files (review them before keeping them).

#[test]
fn fixtures_should_match_their_expected_outcomes() {
    operon_sdk::testing::fixtures::check_dir::<rust_webapp::WebAppReconciler>(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../webapp/fixtures"
    ));
}
