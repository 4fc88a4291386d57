//! Fuzz target `engine_result_decode`: see `harness::engine_result_decode` for what it feeds and what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::engine_result_decode(data));
