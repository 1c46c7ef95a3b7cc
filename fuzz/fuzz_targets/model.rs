#![no_main]
//! Fuzz target `model`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("model", data));
