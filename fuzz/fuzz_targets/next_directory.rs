#![no_main]
//! Fuzz target `next_directory`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("next_directory", data));
