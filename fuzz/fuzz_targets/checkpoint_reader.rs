//! The `checkpoint_reader` target: what it checks is `inplaced_fuzz_checks::checkpoint_reader` (tests/fuzz-checks), which the
//! test suite also runs over `fuzz/seeds/checkpoint_reader/` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| inplaced_fuzz_checks::checkpoint_reader(data));
