//! Tests that cannot run here are counted as skipped, not passed.
//!
//! libtest has no runtime skip: a test that returns early passes. So a test
//! that finds a tool missing calls [`skip`], which says why on stderr and
//! appends one line to the file [`LEDGER`] names. `cargo xtask test` sets
//! it, and counts every line as a skipped test taken from the passed ones
//! in its closing `tests: N passed, M failed, K skipped`. Under the
//! tool's `OPERON_REQUIRE_*` variable set to `1` (CI, which installs every
//! tool) [`skip`] fails the test instead.

use std::io::Write as _;

/// The environment variable naming the skip ledger.
pub const LEDGER: &str = "OPERON_SKIP_LEDGER";

/// Count the running test as skipped for `reason`, or fail it when
/// `require` (an `OPERON_REQUIRE_*` variable) is `1`. The caller returns
/// right after.
///
/// # Panics
///
/// When `require` is set to `1`, or the ledger cannot be written.
pub fn skip(require: &str, reason: &str) {
    if std::env::var(require).is_ok_and(|v| v == "1") {
        panic!("{require}=1, but this test cannot run here: {reason}");
    }
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let binary = std::env::args().next().unwrap_or_default();
    let binary =
        std::path::Path::new(&binary).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let binary = binary.rsplit_once('-').map_or(binary.as_str(), |(name, _hash)| name).to_string();
    eprintln!("skipped {binary}::{test}: {reason} (set {require}=1 to fail instead)");
    if let Some(path) = std::env::var_os(LEDGER) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{LEDGER}={}: {e}", path.to_string_lossy()));
        // One write per line: concurrent tests append whole lines.
        file.write_all(format!("{binary}::{test}: {reason}\n").as_bytes()).unwrap();
    }
}
