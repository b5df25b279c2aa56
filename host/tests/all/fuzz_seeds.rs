//! The fuzz targets' checks (`fuzz/checks.rs`) on their seeds and on the
//! built guests, with a few deterministic mutations of each: what a fuzz
//! run found and kept as a seed stays a regression test here, without the
//! fuzz build. Fuzzing itself (`cargo xtask fuzz --seconds N`) is for long
//! runs by hand (docs/RELIABILITY.md).

#[path = "../../../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `input`, whole, cut at a few lengths, and with a few bytes flipped: the
/// same every run.
fn variants(input: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![input.to_vec()];
    let n = input.len();
    for i in 1..8 {
        out.push(input[..n * i / 8].to_vec());
    }
    for i in 0..8 {
        if n > 0 {
            let mut flipped = input.to_vec();
            let at = (n * (2 * i + 1) / 16).min(n - 1);
            flipped[at] ^= 0x5a;
            out.push(flipped);
        }
    }
    out
}

#[test]
fn the_outcome_checks_should_hold_on_every_seed() {
    let dir = root().join("fuzz/seeds/outcome");
    let seeds: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    for seed in seeds {
        for input in variants(&std::fs::read(&seed).unwrap()) {
            checks::outcome(&input);
        }
    }
}

#[test]
fn the_load_checks_should_hold_on_the_small_built_guests() {
    let dir = crate::common::guests_dir();
    let mut guests: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; build the guests first with `cargo xtask guests`", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    guests.sort();
    assert!(!guests.is_empty(), "no built guests in {}", dir.display());
    for (_, guest) in guests.iter().take(4) {
        for input in variants(&std::fs::read(guest).unwrap()) {
            checks::load(&input);
        }
    }
}
