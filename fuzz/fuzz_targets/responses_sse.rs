//! Fuzz target `responses_sse`: see `harness::responses_sse` for what it feeds and what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::responses_sse(data));
