//! Kubelet releases, hash eras and the Go JSON escaping each release was built with.

use std::fmt;

use super::HashError;
use super::encode::GoJsonEscaping;

/// Oldest release whose hash is JSON-based (era A).
pub const OLDEST_MINOR: u32 = 16;
/// Newest minor release whose v1.Container schema this module knows field by field. Newer
/// releases are treated like this one (era C hashes only name and image).
pub const NEWEST_KNOWN_MINOR: u32 = 37;

/// How a kubelet release computes `io.kubernetes.container.hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Era {
    /// 1.16–1.26: JSON of the whole container.
    A,
    /// 1.27–1.30: as A, plus `hashWithoutResources` (Resources zeroed).
    B,
    /// 1.31+: JSON of `{"image":..,"name":..}` only.
    C,
}

impl Era {
    pub(crate) fn of_minor(minor: u32) -> Era {
        match minor {
            0..=26 => Era::A,
            27..=30 => Era::B,
            _ => Era::C,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Era::A => "A",
            Era::B => "B",
            Era::C => "C",
        }
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kubelet release: `1.30`, `1.30.7`, `v1.37.0-beta.0`, `v1.29.3+k3s1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KubeletVersion {
    minor: u32,
    patch: Option<u32>,
    pre: Option<String>,
}

impl KubeletVersion {
    /// A release by minor number (patch unknown: the newest patch is assumed where it matters).
    pub fn from_minor(minor: u32) -> Result<Self, HashError> {
        check_minor(minor, &format!("1.{minor}"))?;
        Ok(KubeletVersion {
            minor,
            patch: None,
            pre: None,
        })
    }

    pub fn parse(s: &str) -> Result<Self, HashError> {
        let invalid = |why: &str| HashError::InvalidVersion {
            input: s.to_owned(),
            reason: why.to_owned(),
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        // Build metadata (+k3s1) never changes the hash.
        let t = t.split('+').next().unwrap_or(t);
        let (core, pre) = match t.split_once('-') {
            Some((c, p)) if !p.is_empty() => (c, Some(p.to_owned())),
            Some(_) => return Err(invalid("empty pre-release")),
            None => (t, None),
        };
        let mut parts = core.split('.');
        let num = |p: Option<&str>, what: &str| -> Result<Option<u32>, HashError> {
            match p {
                None => Ok(None),
                Some(x) if !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()) => x
                    .parse()
                    .map(Some)
                    .map_err(|_| invalid(&format!("{what} out of range"))),
                Some(_) => Err(invalid(&format!("{what} is not a number"))),
            }
        };
        let major = num(parts.next(), "major")?.ok_or_else(|| invalid("missing major"))?;
        let minor =
            num(parts.next(), "minor")?.ok_or_else(|| invalid("expected MAJOR.MINOR[.PATCH]"))?;
        let patch = num(parts.next(), "patch")?;
        if parts.next().is_some() {
            return Err(invalid("expected MAJOR.MINOR[.PATCH]"));
        }
        if major != 1 {
            return Err(invalid("only Kubernetes 1.x releases exist"));
        }
        check_minor(minor, s)?;
        Ok(KubeletVersion { minor, patch, pre })
    }

    pub fn minor(&self) -> u32 {
        self.minor
    }

    pub fn patch(&self) -> Option<u32> {
        self.patch
    }

    pub fn era(&self) -> Era {
        Era::of_minor(self.minor)
    }

    /// The Go JSON escaping this release's kubelet binaries most likely used.
    ///
    /// From the release branches' history: 1.30 was released with Go 1.22; release-1.27 to
    /// 1.29 stayed on Go 1.21 through the June 2024 patches (bumped to Go 1.21.11 on 2024-06-06
    /// to unblock them, kubernetes/kubernetes#125367) and moved to Go 1.22 once its build
    /// images existed (kubernetes/release#3652, 2024-06-24), so from the July 2024 patches:
    /// 1.27.16, 1.28.12, 1.29.7. 1.26 and older never used it. With no patch given, the newest
    /// patch is assumed.
    pub(crate) fn default_escaping(&self) -> GoJsonEscaping {
        let first_modern_patch = match self.minor {
            0..=26 => return GoJsonEscaping::Legacy,
            27 => 16,
            28 => 12,
            29 => 7,
            _ => return GoJsonEscaping::Modern,
        };
        match self.patch {
            Some(p) if p < first_modern_patch => GoJsonEscaping::Legacy,
            _ => GoJsonEscaping::Modern,
        }
    }

    /// Whether builds of this release (patch unknown) used both escaping flavours.
    pub(crate) fn escaping_ambiguous(&self) -> bool {
        self.patch.is_none() && (27..=29).contains(&self.minor)
    }
}

fn check_minor(minor: u32, input: &str) -> Result<(), HashError> {
    if minor < OLDEST_MINOR {
        return Err(HashError::UnsupportedVersion {
            version: input.to_owned(),
            reason:
                "kubelets before 1.16 hashed a go-spew dump of the Go struct itself (not JSON); \
                     that era is not supported"
                    .to_owned(),
        });
    }
    Ok(())
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)?;
        if let Some(p) = self.patch {
            write!(f, ".{p}")?;
        }
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for KubeletVersion {
    type Err = HashError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KubeletVersion::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let v = KubeletVersion::parse("v1.37.0-beta.0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.minor(), v.patch(), v.era()), (37, Some(0), Era::C));
        assert_eq!(v.to_string(), "1.37.0-beta.0");
        let v = KubeletVersion::parse("1.30").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.minor(), v.patch(), v.era()), (30, None, Era::B));
        assert!(KubeletVersion::parse("1.29.3+k3s1").is_ok());
        for bad in ["", "1", "2.30", "1.x", "1.30.7.1", "v", "1.30-"] {
            assert!(KubeletVersion::parse(bad).is_err(), "{bad}");
        }
        let e = KubeletVersion::parse("1.15.3")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("before 1.16"), "{e}");
    }

    #[test]
    fn escaping_defaults() {
        let esc = |s: &str| KubeletVersion::parse(s).map(|v| v.default_escaping()).ok();
        assert_eq!(esc("1.26.15"), Some(GoJsonEscaping::Legacy));
        assert_eq!(esc("1.27.15"), Some(GoJsonEscaping::Legacy));
        assert_eq!(esc("1.27.16"), Some(GoJsonEscaping::Modern));
        assert_eq!(esc("1.28.11"), Some(GoJsonEscaping::Legacy));
        assert_eq!(esc("1.28.12"), Some(GoJsonEscaping::Modern));
        assert_eq!(esc("1.28"), Some(GoJsonEscaping::Modern));
        assert_eq!(esc("1.29.6"), Some(GoJsonEscaping::Legacy));
        assert_eq!(esc("1.29.7"), Some(GoJsonEscaping::Modern));
        assert_eq!(esc("1.30.0"), Some(GoJsonEscaping::Modern));
    }
}
