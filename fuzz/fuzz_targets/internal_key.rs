#![no_main]
//! Fuzz target `internal_key`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("internal_key", data));
