//! Kubelet-compatible container hashes, bit-exact (issue 3).
//!
//! For a v1.Container JSON document and a kubelet release this computes what that release writes
//! into the CRI annotation `io.kubernetes.container.hash` (and, for 1.27–1.30,
//! `io.kubernetes.container.hashWithoutResources`). Pure library code, no I/O.
//!
//! How (the facts, with their upstream sources: `docs/kubelet-hash.md` and `docs/go-json.md`):
//! - Eras A (1.16–1.26) and B (1.27–1.30) hash `json.Marshal(container)` *after the kubelet has
//!   decoded the pod with its own Go structs*, so this module reproduces Go's decoding
//!   ([`json`], [`container`]) and encoding ([`encode`], [`crate::quantity`]) exactly, per release.
//!   Era C (1.31+) hashes `{"image":..,"name":..}` but still rejects what Go's decoder rejects
//!   anywhere in the container: an accept-only reader validates it against the schema without
//!   building anything ([`accept`], [`schema`]), and the decoder runs only for what that reader
//!   does not accept (to reject it with Go's reason, or accept what it left aside).
//! - The digest is FNV-1a 32 over the go-spew dump of the JSON bytes ([`fnv`]), fed by the
//!   encoder as it writes (no output buffer unless `--explain` wants the bytes).
//! - Input Go would reject is an error here too ([`HashError`]).
//!
//! Decisions:
//! - Escaping of `\b`/`\f` depends on the Go that built the kubelet; the default per release is
//!   [`KubeletVersion::default_escaping`] (an assumption, documented there) and
//!   [`HashOptions::escaping`] overrides it. Era detection accepts either flavour for 1.27–1.29
//!   when the patch release is unknown.
//! - Releases 1.16–1.25 follow the same rules as 1.26 but are not covered by golden data
//!   (unverified); releases newer than 1.37 are treated like 1.37.

mod accept;
mod arena;
pub mod cli;
mod container;
mod detect;
mod encode;
mod fnv;
mod json;
mod kruise;
#[cfg(test)]
mod proptests;
mod schema;
mod version;

pub use detect::{ReleaseMatch, StoredHashes, detect_writers, would_restart, would_restart_with};
pub use encode::{GoJsonEscaping, go_json_string};
pub use fnv::spew_fnv32a;
pub use json::MAX_DEPTH;
pub use kruise::{SIDECARSET_EXCLUDED_ENVS, extracted_env_from_metadata_hash};
pub use version::{Era, KubeletVersion, NEWEST_KNOWN_MINOR, OLDEST_MINOR};

use container::Purpose;
use encode::{Encoder, Record};
use json::{DecodeError, DecodeErrorKind};

/// Everything that can go wrong, with the JSON path where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    #[error("invalid kubelet version {input:?}: {reason}")]
    InvalidVersion { input: String, reason: String },
    #[error("kubelet {version} is not supported: {reason}")]
    UnsupportedVersion { version: String, reason: String },
    #[error("invalid JSON at byte {offset}: {message}")]
    InvalidJson { offset: usize, message: String },
    #[error("cannot decode {found} into {expected} at {path} (byte {offset})")]
    WrongType {
        path: String,
        found: String,
        expected: &'static str,
        offset: usize,
    },
    #[error("invalid quantity {text:?} at {path}: {source}")]
    InvalidQuantity {
        path: String,
        text: String,
        source: crate::quantity::QuantityError,
    },
}

impl From<Box<DecodeError>> for HashError {
    fn from(e: Box<DecodeError>) -> Self {
        let e = *e;
        let path = match e.path_string() {
            p if p.is_empty() => "the top level".to_owned(),
            p => p,
        };
        match e.kind {
            DecodeErrorKind::Syntax(message) => HashError::InvalidJson {
                offset: e.offset,
                message,
            },
            DecodeErrorKind::Type { found, expected } => HashError::WrongType {
                path,
                found,
                expected,
                offset: e.offset,
            },
            DecodeErrorKind::Quantity { text, error } => HashError::InvalidQuantity {
                path,
                text,
                source: error,
            },
        }
    }
}

/// Knobs for [`hash_container`]; the default reproduces the release's own kubelet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashOptions {
    /// Override the Go JSON escaping flavour (default: [`KubeletVersion::default_escaping`]).
    pub escaping: Option<GoJsonEscaping>,
    /// Don't compute the era-B without-resources hash (saves time when it is not needed).
    pub skip_without_resources: bool,
}

impl HashOptions {
    pub fn with_escaping(escaping: GoJsonEscaping) -> Self {
        HashOptions {
            escaping: Some(escaping),
            ..Default::default()
        }
    }
}

/// The annotation values a kubelet release writes for a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerHashes {
    /// `io.kubernetes.container.hash`.
    pub hash: u64,
    /// `io.kubernetes.container.hashWithoutResources` (era B only, unless skipped).
    pub hash_without_resources: Option<u64>,
}

/// Which of the two era-B payloads to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashedPayload {
    #[default]
    Hash,
    WithoutResources,
}

/// The release whose schema decodes for `version` (newer ones decode as the newest known).
fn schema_minor(version: &KubeletVersion) -> u32 {
    version.minor().min(NEWEST_KNOWN_MINOR)
}

/// Encodes era C's payload `{"image":..,"name":..}`, the rest of the container validated as Go
/// does.
fn encode_era_c(
    enc: &mut Encoder<impl Record>,
    container_json: &[u8],
    version: &KubeletVersion,
) -> Result<(), HashError> {
    let minor = schema_minor(version);
    match container::accept_name_image(container_json, minor) {
        Some((name, image)) => container::encode_name_image(enc, &name, &image),
        // Rejected, or left to the decoder: it accepts or rejects as Go does and says why.
        None => container::with_decoded(container_json, minor, Purpose::Check, |c| {
            container::encode_name_image(enc, c.name, c.image)
        })?,
    }
    Ok(())
}

/// Computes the hash(es) `version`'s kubelet writes for this container JSON.
pub fn hash_container(
    container_json: &[u8],
    version: &KubeletVersion,
    options: &HashOptions,
) -> Result<ContainerHashes, HashError> {
    let escaping = options
        .escaping
        .unwrap_or_else(|| version.default_escaping());
    let era = version.era();
    let mut enc = Encoder::hashing(escaping);
    if era == Era::C {
        encode_era_c(&mut enc, container_json, version)?;
        return Ok(ContainerHashes {
            hash: u64::from(enc.hash()),
            hash_without_resources: None,
        });
    }
    let hashes = container::with_decoded(
        container_json,
        schema_minor(version),
        Purpose::Encode,
        |c| {
            container::encode_container(&mut enc, c, false);
            let mut without = None;
            if era == Era::B && !options.skip_without_resources {
                let mut enc = Encoder::hashing(escaping);
                container::encode_container(&mut enc, c, true);
                without = Some(u64::from(enc.hash()));
            }
            ContainerHashes {
                hash: u64::from(enc.hash()),
                hash_without_resources: without,
            }
        },
    )?;
    Ok(hashes)
}

/// The exact JSON bytes `version`'s kubelet hashes for this container (for `--explain`).
/// [`HashedPayload::WithoutResources`] outside era B is an error-free alias of `Hash`.
pub fn hashed_json(
    container_json: &[u8],
    version: &KubeletVersion,
    options: &HashOptions,
    payload: HashedPayload,
) -> Result<Vec<u8>, HashError> {
    let escaping = options
        .escaping
        .unwrap_or_else(|| version.default_escaping());
    let era = version.era();
    let mut enc = Encoder::recording(escaping, container_json.len() + 64);
    if era == Era::C {
        encode_era_c(&mut enc, container_json, version)?;
    } else {
        let without_resources = era == Era::B && payload == HashedPayload::WithoutResources;
        container::with_decoded(
            container_json,
            schema_minor(version),
            Purpose::Encode,
            |c| container::encode_container(&mut enc, c, without_resources),
        )?;
    }
    Ok(enc.into_bytes())
}

/// Checks that Go would accept this container JSON for `version` (no hashing).
pub fn validate_container(
    container_json: &[u8],
    version: &KubeletVersion,
) -> Result<(), HashError> {
    container::with_decoded(
        container_json,
        schema_minor(version),
        Purpose::Check,
        |_| (),
    )?;
    Ok(())
}

/// Formats a hash as kubelet writes the annotation: lowercase hex, no `0x`, no padding.
pub fn format_hash(hash: u64) -> String {
    format!("{hash:x}")
}

/// Reads an annotation value as kubelet does (`strconv.ParseUint(v, 16, 64)`; missing or
/// unparsable means 0).
pub fn parse_stored_hash(value: Option<&str>) -> u64 {
    let Some(v) = value else { return 0 };
    if v.is_empty() {
        return 0;
    }
    // Any number of leading zeros, no sign (which `u64::from_str_radix` would take); past 64
    // bits is Go's range error, so 0.
    let mut h: u64 = 0;
    for c in v.bytes() {
        let Some(d) = (c as char).to_digit(16) else {
            return 0;
        };
        let Some(next) = h.checked_mul(16).and_then(|h| h.checked_add(u64::from(d))) else {
            return 0;
        };
        h = next;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeletVersion {
        KubeletVersion::parse(s).unwrap()
    }

    #[test]
    fn upstream_vectors() {
        let test_container = br#"{"name":"test_container","image":"foo/image:v1","args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}]}"#;
        let h = hash_container(test_container, &v("1.26"), &HashOptions::default()).unwrap();
        assert_eq!(h.hash, 0x3c42280f);
        let h = hash_container(test_container, &v("1.36"), &HashOptions::default()).unwrap();
        assert_eq!(h.hash, 0x8e45cbd0);
        let sample = br#"{"name":"test_container","image":"foo/image:v1","command":["/bin/testcmd"],"args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}],"env":[{"name":"ENV_FOO","value":"bar"},{"name":"ENV_BAR","valueFrom":{"secretKeyRef":{"name":"foo","key":"bar","optional":true}}}],"resources":{"limits":{"foo":"1G"},"requests":{"foo":"500M"}}}"#;
        assert_eq!(
            hash_container(sample, &v("1.26"), &HashOptions::default())
                .unwrap()
                .hash,
            0x311670a
        );
        let resize = br#"{"name":"foo","image":"bar","resources":{},"resizePolicy":[{"resourceName":"cpu","restartPolicy":"RestartContainer"},{"resourceName":"memory","restartPolicy":"NotRequired"}]}"#;
        let h = hash_container(resize, &v("1.28"), &HashOptions::default()).unwrap();
        assert_eq!(h.hash_without_resources, Some(0x5f62cb4c));
        let resize2 = br#"{"name":"foo","image":"bar","resources":{},"resizePolicy":[{"resourceName":"cpu","restartPolicy":"NotRequired"},{"resourceName":"memory","restartPolicy":"RestartContainer"}]}"#;
        let h = hash_container(resize2, &v("1.28"), &HashOptions::default()).unwrap();
        assert_eq!(h.hash_without_resources, Some(0xcdab9e00));
        let foo_bar = br#"{"name":"foo","image":"bar"}"#;
        assert_eq!(
            hash_container(foo_bar, &v("1.31"), &HashOptions::default())
                .unwrap()
                .hash,
            0x11a6d6d6
        );
    }

    #[test]
    fn stored_hash_parsing() {
        assert_eq!(parse_stored_hash(Some("3c42280f")), 0x3c42280f);
        assert_eq!(parse_stored_hash(Some("3C42280F")), 0x3c42280f);
        assert_eq!(parse_stored_hash(Some("+1")), 0);
        assert_eq!(parse_stored_hash(Some("0x1")), 0);
        assert_eq!(parse_stored_hash(Some("")), 0);
        assert_eq!(parse_stored_hash(Some("ffffffffffffffff")), u64::MAX);
        assert_eq!(parse_stored_hash(Some("1ffffffffffffffff")), 0);
        // Leading zeros do not count towards the 64 bits; a sign is not a digit.
        assert_eq!(parse_stored_hash(Some("000000000311670a0")), 0x311670a0);
        assert_eq!(parse_stored_hash(Some("+311670a")), 0);
        assert_eq!(parse_stored_hash(None), 0);
        assert_eq!(format_hash(0x0311670a), "311670a");
    }

    #[test]
    fn rejects_like_go() {
        for bad in [
            &br#"{"name":"x","ports":[{"containerPort":"80"}]}"#[..],
            br#"["name"]"#,
            br#"{"name":"x",}"#,
            b"",
            br#"{"name":"x"} x"#,
            br#"{"name":"x","resources":{"limits":{"cpu":{}}}}"#,
            br#"{"name":"x","resources":{"limits":{"cpu":"1\u0030"}}}"#,
        ] {
            assert!(hash_container(bad, &v("1.36"), &HashOptions::default()).is_err());
            assert!(hash_container(bad, &v("1.26"), &HashOptions::default()).is_err());
        }
        // A field the release does not know is ignored, even when its value is the wrong type.
        let newer = br#"{"name":"x","restartPolicyRules":"not-a-list"}"#;
        assert!(hash_container(newer, &v("1.33"), &HashOptions::default()).is_ok());
        assert!(hash_container(newer, &v("1.34"), &HashOptions::default()).is_err());
        // A type error early, a syntax error late: still rejected (and reported as syntax).
        let e = hash_container(br#"{"tty":"x","a":}"#, &v("1.26"), &HashOptions::default());
        assert!(matches!(e, Err(HashError::InvalidJson { .. })), "{e:?}");
    }

    #[test]
    fn error_messages_name_the_path() {
        let e = hash_container(
            br#"{"name":"x","ports":[{},{"containerPort":1.5}]}"#,
            &v("1.26"),
            &HashOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ports[1].containerPort"), "{e}");
        let e = hash_container(
            br#"{"resources":{"limits":{"cpu":"abc"}}}"#,
            &v("1.26"),
            &HashOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(r#"resources.limits["cpu"]"#), "{e}");
    }

    #[test]
    fn go_decoding_quirks() {
        let json = |s: &[u8]| {
            String::from_utf8(
                hashed_json(s, &v("1.26"), &HashOptions::default(), HashedPayload::Hash).unwrap(),
            )
            .unwrap()
        };
        // Duplicate slice keys decode into the elements left behind.
        assert_eq!(
            json(br#"{"ports":[{"name":"a","containerPort":1},{"containerPort":2}],"ports":[{"containerPort":3}],"ports":[{},{}]}"#),
            r#"{"name":"","ports":[{"name":"a","containerPort":3},{"containerPort":2}],"resources":{}}"#
        );
        // `[]` and null start afresh.
        assert_eq!(
            json(br#"{"args":["a","b"],"args":[],"args":[null]}"#),
            r#"{"name":"","args":[""],"resources":{}}"#
        );
        // A null divisor keeps the cached text; in a map a null is a fresh zero.
        assert_eq!(
            json(br#"{"env":[{"name":"a","valueFrom":{"resourceFieldRef":{"resource":"r","divisor":"1m","divisor":null}}}]}"#),
            r#"{"name":"","env":[{"name":"a","valueFrom":{"resourceFieldRef":{"resource":"r","divisor":"1m"}}}],"resources":{}}"#
        );
        // IntOrString null keeps the old int value and switches to int.
        assert_eq!(
            json(br#"{"livenessProbe":{"tcpSocket":{"port":5,"port":"x","port":null}}}"#),
            r#"{"name":"","resources":{},"livenessProbe":{"tcpSocket":{"port":5}}}"#
        );
        assert_eq!(json(b"null"), r#"{"name":"","resources":{}}"#);
    }
}
