//! Fuzz target `codex_jsonrpc_line`: see `harness::codex_jsonrpc_line` for what it feeds and what it checks.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::codex_jsonrpc_line(data));
