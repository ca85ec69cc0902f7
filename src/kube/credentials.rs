//! The agent's API credentials over weeks: client certificates the kubelet rotates, CA bundles
//! replaced, service-account tokens re-projected, exec plugins' short-lived tokens. kube-rs reads
//! most of them once, when a client is built, so the agent's client is a [`ReloadingService`]
//! that builds a new inner client (new connections, new TLS identity, new auth) when
//!
//! - a file the credentials were read from changed on disk (looked at every
//!   [`FILE_CHECK_INTERVAL`], on the way of a request),
//! - the API server answered 401 to the current credentials (read them all again, run the exec
//!   plugin again), or
//! - an exec plugin's client certificate is about to expire.
//!
//! Requests under way (open watches) finish on the client they started on. Credentials still
//! refused after being read again are *rejected*: `/readyz` and one warning say so, and callers
//! keep retrying with their back-off, each retry re-reading at most every
//! [`REREAD_REJECTED_INTERVAL`]. Also here: which credential files are open to group or others
//! (a warning at start).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ::kube::client::Body;
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use http::{Request, Response};

use super::KubeError;
use crate::health::Health;

/// How often, at most, the credential files are looked at for a change.
pub(crate) const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// How often, at most, credentials the API server keeps refusing are read again.
pub(crate) const REREAD_REJECTED_INTERVAL: Duration = Duration::from_secs(30);
/// How long before an exec plugin's client certificate expires a new one is asked for.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// The readiness dependency rejected credentials are reported under.
const HEALTH_KEY: &str = "api-credentials";
/// The service-account CA kube-rs reads in a pod (kube-rs does not export the path).
const IN_CLUSTER_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

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
fn credential_files(path: &Path) -> Vec<PathBuf> {
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
struct CredentialStamps(Vec<(PathBuf, Option<(std::time::SystemTime, u64)>)>);

impl CredentialStamps {
    fn of(files: Vec<PathBuf>) -> Self {
        let stamp = |file: &Path| {
            let meta = std::fs::metadata(file).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        };
        CredentialStamps(files.into_iter().map(|f| (f.clone(), stamp(&f))).collect())
    }

    /// The first file whose stamp differs from `earlier`'s.
    fn changed_since(&self, earlier: &CredentialStamps) -> Option<&Path> {
        self.0
            .iter()
            .zip(&earlier.0)
            .find(|(now, then)| now != then)
            .map(|(now, _)| now.0.as_path())
    }
}

/// Where the agent's API credentials come from.
#[derive(Debug, Clone)]
pub(crate) enum CredentialSource {
    Kubeconfig(PathBuf),
    InCluster,
}

impl std::fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Kubeconfig(path) => {
                write!(
                    f,
                    "the kubeconfig {} and the files it names",
                    path.display()
                )
            }
            CredentialSource::InCluster => f.write_str("the pod's service account"),
        }
    }
}

impl CredentialSource {
    /// Reads the credentials as they are now: a client configuration (running the exec plugin,
    /// if the kubeconfig names one).
    async fn config(&self) -> Result<::kube::Config, KubeError> {
        let mut config = match self {
            CredentialSource::Kubeconfig(path) => {
                let error = |message: String| KubeError::Kubeconfig {
                    path: path.display().to_string(),
                    message,
                };
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
                ::kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| error(e.to_string()))?
            }
            CredentialSource::InCluster => {
                ::kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))?
            }
        };
        // Audit logs and managedFields name the agent (the API server takes the manager's name
        // from the User-Agent); kube-rs sends none.
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("inplaced/", env!("CARGO_PKG_VERSION"))),
        ));
        Ok(config)
    }

    /// The files whose change on disk means new credentials.
    fn files(&self) -> Vec<PathBuf> {
        match self {
            CredentialSource::Kubeconfig(path) => credential_files(path),
            CredentialSource::InCluster => vec![PathBuf::from(IN_CLUSTER_CA)],
        }
    }

    /// Warns about secret files that group or others can read.
    pub(crate) fn warn_if_exposed(&self) {
        let CredentialSource::Kubeconfig(path) = self else {
            return;
        };
        let Ok(kubeconfig) = Kubeconfig::read_from(path) else {
            return;
        };
        for (file, mode) in exposed_credentials(path, &kubeconfig) {
            tracing::warn!(
                file = %file.display(),
                mode = format!("{mode:04o}"),
                "a file with API credentials is accessible to group or others; chmod 0600 it"
            );
        }
    }
}

/// An inner client and the credentials it was built from.
struct Built {
    client: ::kube::Client,
    stamps: CredentialStamps,
    /// Counts the clients built, to tell a 401 to the current credentials from one to earlier.
    generation: u64,
    /// Built because the API server refused the previous credentials.
    after_rejection: bool,
    at: Instant,
}

impl Built {
    /// An exec plugin's client certificate that expires within the margin.
    fn expiring(&self) -> bool {
        self.client.valid_until().is_some_and(|until| {
            let margin =
                k8s_openapi::jiff::SignedDuration::try_from(EXPIRY_MARGIN).unwrap_or_default();
            k8s_openapi::jiff::Timestamp::now() + margin >= until
        })
    }
}

/// The current inner client, rebuilt as the credentials change; shared by every clone of the
/// agent's client.
pub(crate) struct Credentials {
    source: CredentialSource,
    health: Health,
    state: Mutex<State>,
    /// One rebuild at a time: requests that find the credentials changed wait for it.
    rebuilding: tokio::sync::Mutex<()>,
    /// One look at the files at a time, and every request that comes due meanwhile waits for
    /// its outcome: a request sent beside it would go out with what the look may replace (seen
    /// on a real apiserver: one 401 with a certificate rotated 27 s before).
    checking: tokio::sync::Mutex<()>,
}

struct State {
    built: Arc<Built>,
    files_checked: Instant,
    rejected: bool,
}

impl Credentials {
    /// Reads the credentials and builds the first inner client.
    pub(crate) async fn load(
        source: CredentialSource,
        health: Health,
    ) -> Result<(Arc<Credentials>, String), KubeError> {
        let (built, namespace) = build(&source, 1, false).await?;
        let credentials = Credentials {
            source,
            health,
            state: Mutex::new(State {
                built: Arc::new(built),
                files_checked: Instant::now(),
                rejected: false,
            }),
            rebuilding: tokio::sync::Mutex::new(()),
            checking: tokio::sync::Mutex::new(()),
        };
        Ok((Arc::new(credentials), namespace))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The client for the next request, rebuilt first if the credential files changed or an
    /// exec plugin's certificate is expiring.
    async fn current(&self) -> Arc<Built> {
        let due = |state: &State| {
            state.files_checked.elapsed() >= FILE_CHECK_INTERVAL || state.built.expiring()
        };
        {
            let state = self.lock();
            if !due(&state) {
                return state.built.clone();
            }
        }
        let _one_look = self.checking.lock().await;
        let built = {
            let state = self.lock();
            // Another request looked while this one waited.
            if !due(&state) {
                return state.built.clone();
            }
            state.built.clone()
        };
        let files = self.source.files();
        let changed = CredentialStamps::of(files)
            .changed_since(&built.stamps)
            .map(Path::to_owned);
        if let Some(file) = changed {
            let reason = format!("{} changed on disk", file.display());
            self.rebuild(built.generation, false, &reason).await;
        } else if built.expiring() {
            self.rebuild(
                built.generation,
                false,
                "the exec plugin's client certificate expires",
            )
            .await;
        }
        let mut state = self.lock();
        state.files_checked = Instant::now();
        state.built.clone()
    }

    /// Builds a new inner client unless one newer than `generation` exists already. A
    /// failure keeps the current one (a file caught half-written is read again later).
    async fn rebuild(&self, generation: u64, after_rejection: bool, reason: &str) {
        let _one_at_a_time = self.rebuilding.lock().await;
        if self.lock().built.generation != generation {
            return;
        }
        match build(&self.source, generation + 1, after_rejection).await {
            Ok((built, _)) => {
                tracing::info!(%reason, "API credentials read again; new connections use them");
                self.lock().built = Arc::new(built);
            }
            Err(err) => {
                tracing::warn!(%reason, error = %err, "cannot read the API credentials again; keeping the current ones");
            }
        }
    }

    /// The API server answered a request sent with the credentials of `built`.
    async fn answered(&self, built: &Built, status: http::StatusCode) {
        if status != http::StatusCode::UNAUTHORIZED {
            if status.is_success() && std::mem::take(&mut self.lock().rejected) {
                tracing::info!("the API server accepts the agent's credentials again");
                self.health.set(HEALTH_KEY, Ok(()));
            }
            return;
        }
        if !built.after_rejection {
            // Perhaps only the copy in memory is stale (a token rewritten, an exec plugin's
            // token expired early): read everything again before calling the credentials bad.
            self.rebuild(
                built.generation,
                true,
                "the API server answered 401 Unauthorized",
            )
            .await;
            return;
        }
        if !std::mem::replace(&mut self.lock().rejected, true) {
            let reason = format!(
                "the API server refuses the agent's credentials (401 Unauthorized) after reading them again from {}; retrying with back-off",
                self.source
            );
            tracing::error!("{reason}");
            self.health.set(HEALTH_KEY, Err(reason));
        }
        if built.at.elapsed() >= REREAD_REJECTED_INTERVAL {
            self.rebuild(
                built.generation,
                true,
                "the API server still answers 401 Unauthorized",
            )
            .await;
        }
    }
}

/// Reads the credentials and builds an inner client; with its default namespace.
async fn build(
    source: &CredentialSource,
    generation: u64,
    after_rejection: bool,
) -> Result<(Built, String), KubeError> {
    // Stamped before reading: a change during the read is seen at the next check.
    let stamps = CredentialStamps::of(source.files());
    let config = source.config().await?;
    let namespace = config.default_namespace.clone();
    // Building runs an exec plugin, if any, as a blocking command: off the runtime thread,
    // which every other worker of the agent shares.
    let client = tokio::task::spawn_blocking(move || ::kube::Client::try_from(config))
        .await
        .map_err(|e| KubeError::Client(e.to_string()))?
        .map_err(|e| KubeError::Client(e.to_string()))?;
    let built = Built {
        client,
        stamps,
        generation,
        after_rejection,
        at: Instant::now(),
    };
    Ok((built, namespace))
}

/// The agent client's innermost service: sends each request with the current inner client.
#[derive(Clone)]
pub(crate) struct ReloadingService(pub(crate) Arc<Credentials>);

impl tower::Service<Request<Body>> for ReloadingService {
    type Response = Response<Body>;
    type Error = ::kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, ::kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let credentials = self.0.clone();
        Box::pin(async move {
            let built = credentials.current().await;
            let response = built.client.send(request).await?;
            credentials.answered(&built, response.status()).await;
            Ok(response)
        })
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
