#![no_main]
//! Fuzz target `memo_block`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("memo_block", data));
