//! Every fixture in `fixtures/` natively, through the code path the
//! component runs: `operon test` runs the same files through the component.
//! `OPERON_BLESS=1 cargo test` rewrites the expected files (review them).

#[test]
fn fixtures_should_match_their_expected_outcomes() {
    operon_sdk::testing::fixtures::check_dir::<{{ident}}::GreetingReconciler>(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures"
    ));
}
