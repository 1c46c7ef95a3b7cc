#![no_main]
//! Fuzz target `manifest_edit`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("manifest_edit", data));
