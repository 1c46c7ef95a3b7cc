#![no_main]
//! Fuzz target `index_value`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("index_value", data));
