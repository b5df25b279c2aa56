//! Arbitrary bytes as a module: `checks::load` says what must hold. Seeded
//! with the built guests (`target/guests/*.wasm`), so mutations explore
//! real components.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::load(data));
