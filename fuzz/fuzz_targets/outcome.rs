//! A guest's outcome, as hostile as bytes allow, through conversion and
//! validation: `checks::outcome` says what must hold.

#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::outcome(data));
