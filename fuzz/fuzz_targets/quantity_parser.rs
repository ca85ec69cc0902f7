//! The `quantity_parser` target: what it checks is `inplaced_fuzz_checks::quantity_parser` (tests/fuzz-checks), which the
//! test suite also runs over `fuzz/seeds/quantity_parser/` on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| inplaced_fuzz_checks::quantity_parser(data));
