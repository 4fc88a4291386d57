//! Fuzz target `config_json5`: see `harness::config_json5` for what it feeds and what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::config_json5(data));
