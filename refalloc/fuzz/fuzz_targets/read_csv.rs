//! Any bytes through the CSV trace reader (the checks: `_refalloc::fuzzing::read_csv`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| _refalloc::fuzzing::read_csv(data));
