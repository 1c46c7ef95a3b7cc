#![no_main]
//! Fuzz target `standalone_entry`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("standalone_entry", data));
