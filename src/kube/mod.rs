//! The agent's view of the Kubernetes API: a client built from a kubeconfig or the in-cluster
//! configuration, with request metrics and a client-side rate limit, and reflectors for the pods
//! bound to this node and for the node object itself.

mod cached_pod;
pub mod events;
mod layer;
pub mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::reflector::{self, Store};
use ::kube::runtime::{WatchStreamExt, watcher};
use ::kube::{Api, Client};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;

use crate::health::Health;
use crate::metrics::Metrics;
use crate::resize::resources::Resources;
pub use cached_pod::{
    CachedContainer, CachedContainerStatus, CachedPod, CachedPodSpec, CachedPodStatus,
};
pub use layer::ApiLayer;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cannot read kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("no kubeconfig given and not running in a cluster: {0}")]
    InCluster(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
}

/// Builds the API client: the kubeconfig at `kubeconfig` when given, else the in-cluster
/// service account. Every request goes through [`ApiLayer`] (metrics, rate limit, answer
/// deadline).
pub async fn client(
    kubeconfig: Option<&Path>,
    metrics: Metrics,
    qps: u32,
    burst: u32,
    answer_deadline: Duration,
) -> Result<Client, KubeError> {
    let config = match kubeconfig {
        Some(path) => {
            let error = |message: String| KubeError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
            for (file, mode) in exposed_credentials(path, &kubeconfig) {
                tracing::warn!(
                    file = %file.display(),
                    mode = format!("{mode:04o}"),
                    "a file with API credentials is accessible to group or others; chmod 0600 it"
                );
            }
            ::kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| error(e.to_string()))?
        }
        None => ::kube::Config::incluster().map_err(|e| KubeError::InCluster(e.to_string()))?,
    };
    let mut config = config;
    // Audit logs and managedFields name the agent (the API server takes the manager's name
    // from the User-Agent); kube-rs sends none.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("inplaced/", env!("CARGO_PKG_VERSION"))),
    ));
    let builder = ::kube::client::ClientBuilder::try_from(config)
        .map_err(|e| KubeError::Client(e.to_string()))?;
    Ok(builder
        .with_layer(&ApiLayer::new(metrics, qps, burst, answer_deadline))
        .build())
}

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
pub fn exposed_credentials(path: &Path, kubeconfig: &Kubeconfig) -> Vec<(PathBuf, u32)> {
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
    pub fn changed_since(&self, earlier: &CredentialStamps) -> Option<&Path> {
        self.0
            .iter()
            .zip(&earlier.0)
            .find(|(now, then)| now != then)
            .map(|(now, _)| now.0.as_path())
    }
}

/// The pods bound to this node, kept current by a watch; `changes` ticks on every change.
#[derive(Clone)]
pub struct NodePods {
    pub store: Store<CachedPod>,
    pub changes: watch::Receiver<u64>,
}

/// The node object (for the kubelet's version), kept current by a watch; `changes` ticks on
/// every change.
#[derive(Clone)]
pub struct NodeObject {
    pub store: Store<Node>,
    pub changes: watch::Receiver<u64>,
}

impl NodeObject {
    /// The kubelet version the node reports in `status.nodeInfo.kubeletVersion`.
    pub fn kubelet_version(&self) -> Option<String> {
        let nodes = self.store.state();
        let node = nodes.first()?;
        let version = node
            .status
            .as_ref()?
            .node_info
            .as_ref()?
            .kubelet_version
            .clone();
        (!version.is_empty()).then_some(version)
    }

    /// `status.allocatable` cpu and memory, in the request fields of [`Resources`]; a value
    /// that is missing or cannot be read is left unset (and so not checked).
    pub fn allocatable(&self) -> Option<Resources> {
        let nodes = self.store.state();
        let allocatable = nodes.first()?.status.as_ref()?.allocatable.as_ref()?;
        let mut resources = Resources::default();
        for key in ["cpu", "memory"] {
            let Some(quantity) = allocatable.get(key) else {
                continue;
            };
            let one = serde_json::json!({ "requests": { key: quantity } });
            match Resources::from_requirements(&one) {
                Ok(r) => {
                    resources.cpu_request = resources.cpu_request.or(r.cpu_request);
                    resources.memory_request = resources.memory_request.or(r.memory_request);
                }
                // Read on every pass of the main loop: debug, not a warning each second.
                Err(err) => {
                    tracing::debug!(error = %err, "the node's allocatable {key} cannot be read")
                }
            }
        }
        Some(resources)
    }
}

/// Starts watching the pods whose `spec.nodeName` is `node_name`. The initial list may be served
/// from the API server's watch cache (resourceVersion "0"): on a fleet of thousands of nodes
/// that keeps the agents off etcd. The watch backs off on errors, resumes from its last
/// resourceVersion, and relists on 410 Gone; the store survives all of it.
pub fn watch_node_pods(
    client: Client,
    node_name: &str,
    metrics: Metrics,
    health: Health,
    startup_jitter: Duration,
) -> (NodePods, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("spec.nodeName={node_name}"))
        .any_semantic();
    // kube-rs drops resourceVersion=0 from paged lists; one node's pods fit in one page.
    config.page_size = None;
    // Decoded straight into the cache's lean form: a full pod is never built.
    let api: Api<CachedPod> = Api::all(client);
    let stream = relist_promptly(watcher(api, config)).reflect(writer);
    let task = drive(
        stream,
        "pods",
        metrics,
        health,
        startup_jitter,
        Arc::new(tick),
    );
    (
        NodePods {
            store: reader,
            changes,
        },
        task,
    )
}

/// Starts watching this node's own Node object.
pub fn watch_node(
    client: Client,
    node_name: &str,
    metrics: Metrics,
    health: Health,
) -> (NodeObject, impl Future<Output = ()> + Send + 'static) {
    let (reader, writer) = reflector::store();
    let (tick, changes) = watch::channel(0u64);
    let mut config = watcher::Config::default()
        .fields(&format!("metadata.name={node_name}"))
        .any_semantic();
    config.page_size = None;
    let api: Api<Node> = Api::all(client);
    let stream = relist_promptly(watcher(api, config)).reflect(writer);
    let task = drive(
        stream,
        "nodes",
        metrics,
        health,
        Duration::ZERO,
        Arc::new(tick),
    );
    (
        NodeObject {
            store: reader,
            changes,
        },
        task,
    )
}

/// The watcher's default backoff, except that a 410 Gone (the watch's resourceVersion expired:
/// relist) starts it over. A 410 is the API server answering, typically its first answer after
/// an outage; before, it cost one more step of a backoff grown to 30 s during the outage, so
/// the cache followed the API again up to a minute after the server was back. A 410 in a loop
/// still waits the first step (800 ms, jittered) each time.
struct RelistBackoff {
    inner: watcher::DefaultBackoff,
    expired: Arc<AtomicBool>,
}

impl Iterator for RelistBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        if self.expired.swap(false, Ordering::Relaxed) {
            ::kube::runtime::utils::Backoff::reset(&mut self.inner);
        }
        self.inner.next()
    }
}

impl ::kube::runtime::utils::Backoff for RelistBackoff {
    fn reset(&mut self) {
        ::kube::runtime::utils::Backoff::reset(&mut self.inner);
    }
}

/// `stream` with [`RelistBackoff`].
fn relist_promptly<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    let expired = Arc::new(AtomicBool::new(false));
    let seen = expired.clone();
    // Runs on each item before the backoff layer sees it.
    let stream = stream.inspect(move |item| {
        if matches!(item, Err(watcher::Error::WatchError(status)) if status.code == 410) {
            seen.store(true, Ordering::Relaxed);
        }
    });
    stream.backoff(RelistBackoff {
        inner: watcher::DefaultBackoff::default(),
        expired,
    })
}

/// A watch failing without a success in between for this long makes the agent unready: its
/// cache, and every decision taken from it, no longer follows the API.
const WATCH_FAILING_UNREADY: Duration = Duration::from_secs(60);

/// No error for this long after errors: the watch works again.
const WATCH_QUIET_AFTER_ERRORS: Duration = Duration::from_secs(45);

async fn drive<S, K>(
    stream: S,
    resource: &'static str,
    metrics: Metrics,
    health: Health,
    startup_jitter: Duration,
    tick: Arc<watch::Sender<u64>>,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let key = match resource {
        "pods" => "pods watch",
        _ => "node watch",
    };
    if !startup_jitter.is_zero() {
        tokio::time::sleep(startup_jitter.mul_f64(rand::random_range(0.0..1.0))).await;
    }
    let mut stream = std::pin::pin!(stream);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        // A watch that works again is quiet on a quiet node: no error for longer than the
        // watcher's longest backoff (30 s) means it works.
        let next = match failing_since {
            Some(_) => match tokio::time::timeout(WATCH_QUIET_AFTER_ERRORS, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    failing_since = None;
                    health.set(key, Ok(()));
                    continue;
                }
            },
            None => stream.next().await,
        };
        let Some(item) = next else { break };
        match item {
            Ok(_) => {
                if failing_since.take().is_some() {
                    health.set(key, Ok(()));
                }
                tick.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(err) => {
                metrics.count_watch_restart(resource);
                tracing::warn!(resource, error = %err, "watch failed; backing off and resuming");
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= WATCH_FAILING_UNREADY {
                    health.set(
                        key,
                        Err(format!("failing for {}s: {err}", since.elapsed().as_secs())),
                    );
                }
            }
        }
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

    /// The scripted watch: an error, 50 s of quiet (it works again), then errors every 20 s for
    /// 80 s, then quiet again.
    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_for_a_minute_makes_the_agent_unready_until_it_recovers() {
        let health = Health::new(crate::systemd::Heartbeat::default());
        let (tick, changes) = watch::channel(0u64);
        // (seconds before the item, whether it is an error)
        let script: Vec<(u64, bool)> = vec![
            (1, false),
            (10, true),
            (50, true),
            (20, true),
            (20, true),
            (20, true),
            (120, false),
        ];
        let stream = futures::stream::unfold(script.into_iter(), |mut script| async move {
            let (wait, error) = script.next()?;
            tokio::time::sleep(Duration::from_secs(wait)).await;
            let item = if error {
                Err(watcher::Error::NoResourceVersion)
            } else {
                Ok(watcher::Event::<CachedPod>::InitDone)
            };
            Some((item, script))
        });
        let seen = health.clone();
        let reasons = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = reasons.clone();
        let watch_reasons = tokio::spawn(async move {
            let mut subscribed = seen.subscribe();
            while subscribed.changed().await.is_ok() {
                log.lock().expect("log").push(seen.unready_reasons());
            }
        });
        drive(
            stream,
            "pods",
            Metrics::new(),
            health.clone(),
            Duration::ZERO,
            Arc::new(tick),
        )
        .await;
        tokio::task::yield_now().await;
        watch_reasons.abort();
        let reasons = reasons.lock().expect("log").clone();
        // The lone error at 11 s is forgotten after 45 s of quiet; the errors from 61 s on make
        // the agent unready at 121 s (failing for 60 s), and 45 s of quiet after the last one
        // ready again, before the event at 241 s.
        let unready: Vec<&Vec<String>> = reasons.iter().filter(|r| !r.is_empty()).collect();
        assert_eq!(unready.len(), 1, "{reasons:?}");
        assert!(
            unready[0][0].starts_with("pods watch: failing for 60s"),
            "{reasons:?}"
        );
        assert!(reasons.last().is_some_and(Vec::is_empty), "{reasons:?}");
        assert!(health.unready_reasons().is_empty());
        assert_eq!(*changes.borrow(), 2, "the events counted");
    }

    /// A 410 starts the backoff over; other errors keep growing it.
    #[test]
    fn an_expired_watch_relists_after_the_first_backoff_step() {
        let expired = Arc::new(AtomicBool::new(false));
        let mut backoff = RelistBackoff {
            inner: watcher::DefaultBackoff::default(),
            expired: expired.clone(),
        };
        let first = backoff.next().expect("a delay");
        let grown = (0..6)
            .filter_map(|_| backoff.next())
            .last()
            .expect("a delay");
        assert!(grown >= Duration::from_secs(10), "{first:?} then {grown:?}");
        expired.store(true, Ordering::Relaxed);
        let after_expiry = backoff.next().expect("a delay");
        assert!(
            after_expiry <= first.max(Duration::from_secs(2)),
            "{after_expiry:?}"
        );
        let next = backoff.next().expect("a delay");
        assert!(next < grown, "it grows again from the start: {next:?}");
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
