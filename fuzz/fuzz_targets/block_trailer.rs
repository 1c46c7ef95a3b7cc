#![no_main]
//! Fuzz target `block_trailer`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("block_trailer", data));
