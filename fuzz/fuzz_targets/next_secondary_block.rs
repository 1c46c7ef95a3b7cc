#![no_main]
//! Fuzz target `next_secondary_block`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("next_secondary_block", data));
