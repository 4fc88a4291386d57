//! Fuzz target `serve_client_frame`: see `harness::serve_client_frame` for what it feeds and what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::serve_client_frame(data));
