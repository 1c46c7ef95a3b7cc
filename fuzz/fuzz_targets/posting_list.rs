#![no_main]
//! Fuzz target `posting_list`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("posting_list", data));
