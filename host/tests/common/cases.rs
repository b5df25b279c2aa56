//! How many cases the shared WebApp fixtures hold (reconcile fixtures and
//! `admission/` reviews), so the language tests expect every one of them to
//! pass — counted from the files, not written down.

use std::path::Path;

/// The summary line `operon test` prints when every shared case passes.
pub fn all_passed(fixtures: &Path) -> String {
    let count = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".expected.yaml"))
                    .count()
            })
            .unwrap_or(0)
    };
    let cases = count(fixtures) + count(&fixtures.join("admission"));
    assert!(cases > 0, "no fixtures in {}", fixtures.display());
    format!("{cases} passed, 0 failed")
}
