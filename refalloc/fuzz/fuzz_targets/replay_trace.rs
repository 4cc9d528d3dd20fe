//! Any event sequence through the carrier model (the checks: `_refalloc::fuzzing::replay_trace`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| _refalloc::fuzzing::replay_trace(data));
