//! Any bytes through the CSV trace reader (the checks: `_refalloc::fuzzing::read_csv`), and
//! through the replay's reader of its rows (`_refalloc::csv::rows_agree`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    _refalloc::fuzzing::read_csv(data);
    _refalloc::csv::rows_agree(data);
});
