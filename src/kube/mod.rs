//! The agent's view of the Kubernetes API: a client built from a kubeconfig or the in-cluster
//! configuration, with request metrics and a client-side rate limit; how its credentials are
//! read again as they rotate is in `credentials`, the watches (pods, node, request objects) in
//! `watches`.

mod cached_pod;
mod credentials;
pub mod events;
mod layer;
mod metrics;
pub mod status;
mod watches;

use std::path::Path;
use std::time::Duration;

use ::kube::Client;
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use tower::Layer;

use crate::health::Health;
use crate::metrics::Metrics;
pub(crate) use cached_pod::lean_pod_resource;
pub use cached_pod::{
    CachedContainer, CachedContainerStatus, CachedPod, CachedPodSpec, CachedPodStatus,
};
use credentials::{CredentialSource, Credentials, ReloadingService};
pub use layer::ApiLayer;
pub(crate) use metrics::ApiMetrics;
pub use watches::{
    NodeObject, NodePods, Watched, WatchedRequests, watch_namespaced, watch_node, watch_node_pods,
    watch_requests,
};

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("cannot read kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("no kubeconfig given and not running in a cluster: {0}")]
    InCluster(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
}

/// The client of the short-lived commands (`inplaced resize`, `inplaced restart`): the named
/// kubeconfig, else kube's default chain ($KUBECONFIG, ~/.kube/config, in-cluster).
pub(crate) async fn command_client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)?;
            let config =
                ::kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await?;
            Client::try_from(config)?
        }
        None => Client::try_default().await?,
    })
}

/// Builds the agent's API client: from the kubeconfig at `kubeconfig` when given, else the
/// in-cluster service account, read again as they rotate (see `credentials`). Every request
/// goes through [`ApiLayer`] (metrics, rate limit, answer deadline); credentials refused even
/// after being read again make `health` unready.
pub async fn client(
    kubeconfig: Option<&Path>,
    metrics: Metrics,
    health: Health,
    limits: ApiLimits,
) -> Result<Client, KubeError> {
    let source = match kubeconfig {
        Some(path) => CredentialSource::Kubeconfig(path.to_owned()),
        None => CredentialSource::InCluster,
    };
    source.warn_if_exposed();
    let (credentials, namespace) = Credentials::load(source, health).await?;
    let layer = ApiLayer::new(metrics, limits.qps, limits.burst, limits.answer_deadline);
    Ok(Client::new(
        layer.layer(ReloadingService(credentials)),
        namespace,
    ))
}

/// Whether an API error answer refuses the request itself, so that sending it again unchanged
/// cannot succeed: a 4xx, but neither 429 (too many requests: come back later) nor 401 (the
/// agent's credentials, which it reads again; the request is retried with them).
pub(crate) fn refuses_request(status: &::kube::core::Status) -> bool {
    (400..500).contains(&status.code) && status.code != 429 && status.code != 401
}

/// A time as apimachinery writes a `metav1.Time` (RFC 3339 in UTC, whole seconds): what
/// kruise's types and kruise-daemon hold, and what a client comparing the field expects.
pub(crate) fn meta_time(at: k8s_openapi::jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The agent's own bounds on its API traffic.
#[derive(Debug, Clone, Copy)]
pub struct ApiLimits {
    pub qps: u32,
    pub burst: u32,
    /// How long a request may wait for the head of its answer.
    pub answer_deadline: Duration,
}
