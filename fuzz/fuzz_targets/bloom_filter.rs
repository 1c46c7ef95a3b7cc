#![no_main]
//! Fuzz target `bloom_filter`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("bloom_filter", data));
