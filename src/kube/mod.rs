//! The agent's view of the Kubernetes API: a client built from a kubeconfig or the in-cluster
//! configuration, with request metrics and a client-side rate limit; the checks of its
//! credential files are in `credentials`, the watches (pods, node, request objects) in `watches`.

mod cached_pod;
mod credentials;
pub mod events;
mod layer;
pub mod request;
mod request_loop;
pub mod status;
mod watches;

use std::path::Path;
use std::time::Duration;

use ::kube::Client;
use ::kube::config::{KubeConfigOptions, Kubeconfig};

use crate::metrics::Metrics;
pub use cached_pod::{
    CachedContainer, CachedContainerStatus, CachedPod, CachedPodSpec, CachedPodStatus,
};
use credentials::exposed_credentials;
pub use credentials::{CredentialStamps, credential_files};
pub use layer::ApiLayer;
pub(crate) use request_loop::{
    MAX_REQUEUE as REQUEST_LOOP_IDLE, RequestController, run_request_loop,
};
pub use watches::{
    NodeObject, NodePods, Watched, WatchedRequests, watch_node, watch_node_pods, watch_requests,
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
pub async fn command_client(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
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
