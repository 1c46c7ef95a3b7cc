#![no_main]
//! Fuzz target `range_filter`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("range_filter", data));
