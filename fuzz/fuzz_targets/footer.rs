#![no_main]
//! Fuzz target `footer`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("footer", data));
