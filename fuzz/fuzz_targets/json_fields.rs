#![no_main]
//! Fuzz target `json_fields`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("json_fields", data));
