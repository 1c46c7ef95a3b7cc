#![no_main]
//! Fuzz target `data_block`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("data_block", data));
