#![no_main]
//! Fuzz target `write_batch`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("write_batch", data));
