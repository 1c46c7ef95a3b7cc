#![no_main]
//! Fuzz target `wal_records`: see `strata::fuzzing`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::fuzzing::run("wal_records", data));
