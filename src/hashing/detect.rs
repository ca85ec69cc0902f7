//! Era detection: which kubelet releases could have written a container's stored hash, and
//! whether a given release would restart the container.
//!
//! Decisions:
//! - Candidates are every minor release from 1.16 to the newest known one; 1.16–1.26 with Go's
//!   legacy escaping, 1.30+ with the modern one, 1.27–1.29 with both (their patch releases
//!   straddle Go 1.22).
//! - Whether InPlacePodVerticalScaling was on for a 1.27–1.30 kubelet is read from the stored
//!   annotations: kubelet writes `hashWithoutResources` only with the gate on. Static pods (for
//!   which the kubelet ignores the gate) cannot be told apart here.

use super::encode::GoJsonEscaping;
use super::version::{Era, KubeletVersion, NEWEST_KNOWN_MINOR, OLDEST_MINOR};
use super::{HashError, HashOptions, hash_container, parse_stored_hash};

/// The hash annotations a running container carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoredHashes {
    /// `io.kubernetes.container.hash` (0 when missing or unparsable, as kubelet reads it).
    pub hash: u64,
    /// `io.kubernetes.container.hashWithoutResources`: `None` when the annotation is absent.
    pub hash_without_resources: Option<u64>,
}

impl StoredHashes {
    /// From the raw annotation values (kubelet's ParseUint semantics).
    pub(crate) fn from_annotations(
        hash: Option<&str>,
        hash_without_resources: Option<&str>,
    ) -> Self {
        StoredHashes {
            hash: parse_stored_hash(hash),
            hash_without_resources: hash_without_resources.map(|v| parse_stored_hash(Some(v))),
        }
    }
}

/// A release (and Go escaping flavour) whose kubelet computes a value equal to a stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseMatch {
    pub minor: u32,
    pub era: Era,
    pub escaping: GoJsonEscaping,
    /// This release computes exactly the stored `hash` for the spec.
    pub hash_matches: bool,
    /// Era B only: this release computes exactly the stored `hashWithoutResources`.
    pub without_resources_matches: bool,
}

fn flavours(minor: u32) -> &'static [GoJsonEscaping] {
    match minor {
        0..=26 => &[GoJsonEscaping::Legacy],
        27..=29 => &[GoJsonEscaping::Legacy, GoJsonEscaping::Modern],
        _ => &[GoJsonEscaping::Modern],
    }
}

/// Every release (1.16 … newest known) whose kubelet computes, for this spec, the stored hash or
/// the stored without-resources hash. Releases that would reject the spec are skipped; if all
/// reject it, that error is returned.
pub fn detect_writers(
    stored: &StoredHashes,
    container_json: &[u8],
) -> Result<Vec<ReleaseMatch>, HashError> {
    let mut matches = Vec::new();
    let mut last_err = None;
    let mut any_ok = false;
    for minor in OLDEST_MINOR..=NEWEST_KNOWN_MINOR {
        let version = KubeletVersion::from_minor(minor)?;
        for &escaping in flavours(minor) {
            let hashes = match hash_container(
                container_json,
                &version,
                &HashOptions::with_escaping(escaping),
            ) {
                Ok(h) => h,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            any_ok = true;
            let hash_matches = hashes.hash == stored.hash;
            let without_resources_matches = matches!(
                (hashes.hash_without_resources, stored.hash_without_resources),
                (Some(a), Some(b)) if a == b
            );
            if hash_matches || without_resources_matches {
                matches.push(ReleaseMatch {
                    minor,
                    era: version.era(),
                    escaping,
                    hash_matches,
                    without_resources_matches,
                });
            }
        }
    }
    match (any_ok, last_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(matches),
    }
}

/// Whether `version`'s kubelet would restart a running container with these stored hashes when
/// it sees `spec` (its `containerChanged` rule; for 1.27–1.30 with the resize gate on, only when
/// the without-resources hash differs too). For 1.27–1.29 given without a patch release, either
/// escaping flavour matching counts as unchanged.
pub fn would_restart(
    stored: &StoredHashes,
    spec: &[u8],
    version: &KubeletVersion,
) -> Result<bool, HashError> {
    if version.escaping_ambiguous() {
        for &escaping in flavours(version.minor()) {
            if !would_restart_with(stored, spec, version, &HashOptions::with_escaping(escaping))? {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    would_restart_with(stored, spec, version, &HashOptions::default())
}

/// [`would_restart`] with explicit options (e.g. a forced escaping flavour).
pub fn would_restart_with(
    stored: &StoredHashes,
    spec: &[u8],
    version: &KubeletVersion,
    options: &HashOptions,
) -> Result<bool, HashError> {
    let opts = HashOptions {
        skip_without_resources: false,
        ..*options
    };
    let h = hash_container(spec, version, &opts)?;
    if h.hash == stored.hash {
        return Ok(false);
    }
    match (
        version.era(),
        stored.hash_without_resources,
        h.hash_without_resources,
    ) {
        (Era::B, Some(stored_wo), Some(wo)) => Ok(stored_wo != wo),
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &[u8] = br#"{"name":"app","image":"nginx","resources":{"limits":{"cpu":"1"}}}"#;

    fn v(s: &str) -> KubeletVersion {
        KubeletVersion::parse(s).unwrap()
    }

    #[test]
    fn detects_eras() {
        let a = hash_container(SPEC, &v("1.26"), &HashOptions::default()).unwrap();
        let found = detect_writers(
            &StoredHashes {
                hash: a.hash,
                hash_without_resources: None,
            },
            SPEC,
        )
        .unwrap();
        assert!(found.iter().all(|m| m.era != Era::C));
        assert!(found.iter().any(|m| m.minor == 26));
        let c = hash_container(SPEC, &v("1.31"), &HashOptions::default()).unwrap();
        let found = detect_writers(
            &StoredHashes {
                hash: c.hash,
                hash_without_resources: None,
            },
            SPEC,
        )
        .unwrap();
        assert!(!found.is_empty() && found.iter().all(|m| m.era == Era::C));
    }

    #[test]
    fn era_b_to_c_upgrade_restarts() {
        let b = hash_container(SPEC, &v("1.30"), &HashOptions::default()).unwrap();
        let stored = StoredHashes {
            hash: b.hash,
            hash_without_resources: b.hash_without_resources,
        };
        assert!(!would_restart(&stored, SPEC, &v("1.30.7")).unwrap());
        assert!(would_restart(&stored, SPEC, &v("1.31")).unwrap());
        // Resource-only change under 1.30 with the gate on: no restart.
        let resized = br#"{"name":"app","image":"nginx","resources":{"limits":{"cpu":"2"}}}"#;
        assert!(!would_restart(&stored, resized, &v("1.30")).unwrap());
        // Without the gate (no stored without-resources hash): restart.
        let no_gate = StoredHashes {
            hash: b.hash,
            hash_without_resources: None,
        };
        assert!(would_restart(&no_gate, resized, &v("1.30")).unwrap());
    }

    #[test]
    fn ambiguous_escaping_accepts_either() {
        let spec = br#"{"name":"a\b","image":"x"}"#;
        let legacy = hash_container(
            spec,
            &v("1.28"),
            &HashOptions::with_escaping(GoJsonEscaping::Legacy),
        )
        .unwrap();
        let stored = StoredHashes {
            hash: legacy.hash,
            hash_without_resources: None,
        };
        assert!(!would_restart(&stored, spec, &v("1.28")).unwrap());
        // A patch built with Go 1.22 (1.28.12) writes `\b`: it restarts; 1.28.11 (Go 1.21) not.
        assert!(would_restart(&stored, spec, &v("1.28.12")).unwrap());
        assert!(!would_restart(&stored, spec, &v("1.28.11")).unwrap());
        let found = detect_writers(&stored, spec).unwrap();
        assert!(
            found
                .iter()
                .any(|m| m.minor == 28 && m.escaping == GoJsonEscaping::Legacy)
        );
        assert!(
            !found
                .iter()
                .any(|m| m.minor == 28 && m.escaping == GoJsonEscaping::Modern)
        );
    }
}
