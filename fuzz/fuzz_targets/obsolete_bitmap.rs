#![no_main]
//! Fuzz target `obsolete_bitmap`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("obsolete_bitmap", data));
