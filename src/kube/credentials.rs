//! The kubeconfig's credential files: which are open to group or others (a warning at start),
//! and which are read once, so that a change on disk (the kubelet rotating its client
//! certificate) is noticed and the agent restarts to read them again.

use std::path::{Path, PathBuf};

use ::kube::config::Kubeconfig;

/// A file a kubeconfig's client credentials come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CredentialFile {
    Kubeconfig,
    ClientCertificate,
    ClientKey,
    TokenFile,
    CertificateAuthority,
}

impl CredentialFile {
    /// Whoever reads it can act as the agent (certificates are public).
    fn is_secret(self) -> bool {
        matches!(
            self,
            CredentialFile::Kubeconfig | CredentialFile::ClientKey | CredentialFile::TokenFile
        )
    }

    /// Read once, when the client is built (kube-rs reads token files again as they change).
    fn is_read_once(self) -> bool {
        self != CredentialFile::TokenFile
    }
}

/// The kubeconfig and every file it names for credentials, relative paths taken from the
/// kubeconfig's directory: users' certificates, keys and token files, then clusters' CAs.
fn named_files(path: &Path, kubeconfig: &Kubeconfig) -> Vec<(PathBuf, CredentialFile)> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let users = kubeconfig
        .auth_infos
        .iter()
        .filter_map(|named| named.auth_info.as_ref())
        .flat_map(|a| {
            [
                (
                    a.client_certificate.clone(),
                    CredentialFile::ClientCertificate,
                ),
                (a.client_key.clone(), CredentialFile::ClientKey),
                (a.token_file.clone(), CredentialFile::TokenFile),
            ]
        });
    let clusters = kubeconfig
        .clusters
        .iter()
        .filter_map(|named| named.cluster.as_ref())
        .map(|c| {
            (
                c.certificate_authority.clone(),
                CredentialFile::CertificateAuthority,
            )
        });
    let named = users
        .chain(clusters)
        .filter_map(|(file, kind)| Some((dir.join(file?), kind)));
    std::iter::once((path.to_owned(), CredentialFile::Kubeconfig))
        .chain(named)
        .collect()
}

/// The kubeconfig and the secret files it names (client keys, token files) whose permissions
/// let group or others read or write them, with their modes.
pub(super) fn exposed_credentials(path: &Path, kubeconfig: &Kubeconfig) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    named_files(path, kubeconfig)
        .into_iter()
        .filter(|(_, kind)| kind.is_secret())
        .filter_map(|(file, _)| {
            let mode = std::fs::metadata(&file).ok()?.permissions().mode() & 0o777;
            (mode & 0o077 != 0).then_some((file, mode))
        })
        .collect()
}

/// The files a kubeconfig's client credentials are read from once, when the client is built:
/// the kubeconfig itself, client certificates and keys, cluster CAs. kubeadm's `kubelet.conf`
/// names `kubelet-client-current.pem`, which the kubelet rotates: a client built before the
/// rotation fails with 401 once the old certificate expires. An unreadable kubeconfig is
/// listed alone.
pub fn credential_files(path: &Path) -> Vec<PathBuf> {
    match Kubeconfig::read_from(path) {
        Ok(kubeconfig) => named_files(path, &kubeconfig)
            .into_iter()
            .filter(|(_, kind)| kind.is_read_once())
            .map(|(file, _)| file)
            .collect(),
        Err(_) => vec![path.to_owned()],
    }
}

/// When each credential file was last changed (following symlinks, as a rotation swaps one),
/// to tell that the credentials on disk are no longer those the client was built with.
#[derive(Debug, PartialEq, Eq)]
pub struct CredentialStamps(Vec<(PathBuf, Option<(std::time::SystemTime, u64)>)>);

impl CredentialStamps {
    pub fn of(files: Vec<PathBuf>) -> Self {
        let stamp = |file: &Path| {
            let meta = std::fs::metadata(file).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        };
        CredentialStamps(files.into_iter().map(|f| (f.clone(), stamp(&f))).collect())
    }

    /// The first file whose stamp differs from `earlier`'s.
    pub(crate) fn changed_since(&self, earlier: &CredentialStamps) -> Option<&Path> {
        self.0
            .iter()
            .zip(&earlier.0)
            .find(|(now, then)| now != then)
            .map(|(now, _)| now.0.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn credentials_open_to_others_are_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            path
        };
        let config = write(
            "kubeconfig",
            "apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    client-certificate: a.crt\n    client-key: a.key\n- name: b\n  user:\n    tokenFile: /nonexistent/token\n- name: c\n  user:\n    tokenFile: token\n",
            0o644,
        );
        write("a.crt", "cert", 0o644);
        write("a.key", "key", 0o600);
        let token = write("token", "secret", 0o640);
        let kubeconfig = Kubeconfig::read_from(&config).expect("kubeconfig");
        assert_eq!(
            exposed_credentials(&config, &kubeconfig),
            vec![(config.clone(), 0o644), (token, 0o640)]
        );
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::set_permissions(
            dir.path().join("token"),
            std::fs::Permissions::from_mode(0o400),
        )
        .expect("chmod");
        assert!(exposed_credentials(&config, &kubeconfig).is_empty());
        // Token files are read again by kube-rs as they change: not among the files read once.
        assert_eq!(
            credential_files(&config),
            [
                config.clone(),
                dir.path().join("a.crt"),
                dir.path().join("a.key")
            ]
        );
    }

    #[test]
    fn a_rotated_client_certificate_is_noticed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("kubelet.conf");
        std::fs::write(
            &config,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    client-certificate: pki/current.pem\n    client-key: pki/current.pem\n",
        )
        .expect("write");
        std::fs::create_dir(dir.path().join("pki")).expect("mkdir");
        std::fs::write(dir.path().join("pki/old.pem"), "old").expect("write");
        std::os::unix::fs::symlink("old.pem", dir.path().join("pki/current.pem")).expect("link");
        std::fs::write(dir.path().join("ca.crt"), "ca").expect("write");
        let files = credential_files(&config);
        assert_eq!(
            files,
            [
                config.clone(),
                dir.path().join("pki/current.pem"),
                dir.path().join("pki/current.pem"),
                dir.path().join("ca.crt"),
            ]
        );
        let before = CredentialStamps::of(files.clone());
        assert_eq!(
            CredentialStamps::of(files.clone()).changed_since(&before),
            None
        );
        // As the kubelet rotates: a new file, the link swapped to it.
        std::fs::write(dir.path().join("pki/new.pem"), "newer cert").expect("write");
        std::fs::remove_file(dir.path().join("pki/current.pem")).expect("unlink");
        std::os::unix::fs::symlink("new.pem", dir.path().join("pki/current.pem")).expect("link");
        assert_eq!(
            CredentialStamps::of(files).changed_since(&before),
            Some(dir.path().join("pki/current.pem").as_path())
        );
    }
}
