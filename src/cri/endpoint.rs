//! Where the CRI socket is: an explicit endpoint, or discovery in kruise-daemon's order.

use std::path::{Path, PathBuf};

use super::CriError;

/// Sockets tried when no endpoint is given: kruise-daemon's order under /var/run, then k3s's
/// embedded containerd. Keeping kruise's order means a node picks the same runtime it picked.
pub const DISCOVERY_ORDER: &[&str] = &[
    "/var/run/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/var/run/crio.sock",
    "/var/run/crio/crio.sock",
    "/var/run/cri-dockerd.sock",
    "/var/run/cri-dockerd/cri-dockerd.sock",
    "/run/k3s/containerd/containerd.sock",
];

/// A CRI endpoint: always a unix socket path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriEndpoint(PathBuf);

impl CriEndpoint {
    /// Parses `unix:///path` or a plain absolute `/path`; other schemes (tcp, npipe) are refused
    /// because a node agent talks to its local runtime only.
    pub fn parse(text: &str) -> Result<Self, CriError> {
        let path = text.strip_prefix("unix://").unwrap_or(text);
        if path.starts_with('/') && !path.contains('\0') {
            Ok(Self(PathBuf::from(path)))
        } else {
            Err(CriError::InvalidEndpoint(text.to_owned()))
        }
    }

    /// The explicit endpoint when given, else the first socket of [`DISCOVERY_ORDER`] that exists.
    pub fn resolve(explicit: Option<&str>) -> Result<Self, CriError> {
        Self::resolve_passing_over(explicit, &[])
    }

    /// As [`resolve`](Self::resolve), passing over discovered sockets known not to speak CRI v1
    /// (Docker Engine's own containerd, whose CRI plugin is off, sits before cri-dockerd): the
    /// first other socket that exists, else the first of those passed over that still exists.
    pub(crate) fn resolve_passing_over(
        explicit: Option<&str>,
        not_cri: &[CriEndpoint],
    ) -> Result<Self, CriError> {
        match explicit {
            Some(text) => Self::parse(text),
            None => Self::discover_passing_over(DISCOVERY_ORDER.iter().map(Path::new), not_cri),
        }
    }

    /// The first candidate that exists, is a socket and is not in `not_cri`; else the first
    /// that exists and is a socket.
    pub(crate) fn discover_passing_over<'a>(
        candidates: impl IntoIterator<Item = &'a Path> + Clone,
        not_cri: &[CriEndpoint],
    ) -> Result<Self, CriError> {
        let others = candidates
            .clone()
            .into_iter()
            .filter(|c| !not_cri.iter().any(|n| n.path() == *c));
        Self::discover(others).or_else(|err| Self::discover(candidates).map_err(|_| err))
    }

    /// The first candidate that exists and is a socket.
    pub(crate) fn discover<'a>(
        candidates: impl IntoIterator<Item = &'a Path>,
    ) -> Result<Self, CriError> {
        use std::os::unix::fs::FileTypeExt;
        let mut tried = Vec::new();
        for candidate in candidates {
            match std::fs::metadata(candidate) {
                Ok(meta) if meta.file_type().is_socket() => return Ok(Self(candidate.to_owned())),
                _ => tried.push(candidate.display().to_string()),
            }
        }
        Err(CriError::NoEndpoint {
            tried: tried.join(", "),
        })
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::fmt::Display for CriEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unix://{}", self.0.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_urls_and_paths() {
        let from_url = CriEndpoint::parse("unix:///run/containerd/containerd.sock").unwrap();
        assert_eq!(
            from_url.path(),
            Path::new("/run/containerd/containerd.sock")
        );
        assert_eq!(
            from_url.to_string(),
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(
            CriEndpoint::parse("/x.sock").unwrap().path(),
            Path::new("/x.sock")
        );
    }

    #[test]
    fn refuses_other_schemes_and_relative_paths() {
        for bad in [
            "tcp://127.0.0.1:1234",
            "npipe:////./pipe/x",
            "x.sock",
            "unix://x.sock",
            "",
        ] {
            let err = CriEndpoint::parse(bad).unwrap_err();
            assert!(matches!(err, CriError::InvalidEndpoint(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn discovery_takes_the_first_existing_socket_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("a.sock");
        let plain_file = dir.path().join("b.sock");
        let second = dir.path().join("c.sock");
        let third = dir.path().join("d.sock");
        std::fs::write(&plain_file, b"not a socket").unwrap();
        let _l2 = std::os::unix::net::UnixListener::bind(&second).unwrap();
        let _l3 = std::os::unix::net::UnixListener::bind(&third).unwrap();
        let found = CriEndpoint::discover([
            first.as_path(),
            plain_file.as_path(),
            second.as_path(),
            third.as_path(),
        ])
        .unwrap();
        assert_eq!(found.path(), second);
    }

    #[test]
    fn discovery_passes_over_sockets_that_are_not_cri() {
        let dir = tempfile::tempdir().unwrap();
        let docker_containerd = dir.path().join("containerd.sock");
        let cri_dockerd = dir.path().join("cri-dockerd.sock");
        let _l1 = std::os::unix::net::UnixListener::bind(&docker_containerd).unwrap();
        let candidates = [docker_containerd.as_path(), cri_dockerd.as_path()];
        let not_cri = [CriEndpoint(docker_containerd.clone())];
        // Nothing else exists yet: the one passed over is still the answer.
        let found = CriEndpoint::discover_passing_over(candidates, &not_cri).unwrap();
        assert_eq!(found.path(), docker_containerd);
        let _l2 = std::os::unix::net::UnixListener::bind(&cri_dockerd).unwrap();
        let found = CriEndpoint::discover_passing_over(candidates, &not_cri).unwrap();
        assert_eq!(found.path(), cri_dockerd);
        let found = CriEndpoint::discover_passing_over(candidates, &[]).unwrap();
        assert_eq!(
            found.path(),
            docker_containerd,
            "kruise-daemon's order otherwise"
        );
    }

    #[test]
    fn discovery_failure_names_every_candidate() {
        let err = CriEndpoint::discover([
            Path::new("/nonexistent/a.sock"),
            Path::new("/nonexistent/b.sock"),
        ])
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/a.sock") && text.contains("/nonexistent/b.sock"),
            "{text}"
        );
        assert!(text.contains("--cri-endpoint"), "{text}");
    }
}
