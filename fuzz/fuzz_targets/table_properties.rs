#![no_main]
//! Fuzz target `table_properties`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("table_properties", data));
