#![no_main]
//! Fuzz target `embedded_zone_maps`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("embedded_zone_maps", data));
