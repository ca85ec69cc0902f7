//! The `container_decoder` target: what it checks is `inplaced_fuzz_checks::container_decoder` (tests/fuzz-checks), which the
//! test suite also runs over `fuzz/seeds/container_decoder/` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| inplaced_fuzz_checks::container_decoder(data));
