//! Any bytes through the trace reader (the checks: `_refalloc::fuzzing::read_trace`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| _refalloc::fuzzing::read_trace(data));
