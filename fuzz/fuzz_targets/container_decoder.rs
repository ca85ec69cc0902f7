//! The Go-faithful container decoder must never panic, whatever the bytes: every input is
//! either hashed or rejected with an error, for every era. Also checks that accepting and
//! rejecting do not depend on the Go escaping flavour, that `--explain` agrees with hashing, and
//! that era C's hash (the accept-only reader, then the decoder for what it leaves) accepts exactly
//! what the full decoder (`validate_container`) accepts.
#![no_main]

use inplaced::hashing::{
    Era, GoJsonEscaping, HashOptions, HashedPayload, KubeletVersion, hash_container, hashed_json,
    spew_fnv32a, validate_container,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for minor in [16, 26, 28, 30, 33, 36] {
        let Ok(version) = KubeletVersion::from_minor(minor) else {
            return;
        };
        let legacy = hash_container(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Legacy),
        );
        let modern = hash_container(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Modern),
        );
        assert_eq!(legacy.is_ok(), modern.is_ok());
        if version.era() == Era::C {
            assert_eq!(validate_container(data, &version).is_ok(), modern.is_ok());
        }
        let explained = hashed_json(
            data,
            &version,
            &HashOptions::with_escaping(GoJsonEscaping::Modern),
            HashedPayload::Hash,
        );
        match (modern, explained) {
            (Ok(h), Ok(j)) => assert_eq!(h.hash, u64::from(spew_fnv32a(&j))),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("hash {a:?} vs explain {b:?}"),
        }
    }
});
