//! The request kinds' common layer, above the node view: what every kind's controller runs with
//! (`Context`), how a request object is read (`decode`), and the loop every kind runs
//! (`request_loop`: `run_kind` watches a kind's requests and drives its `RequestController`).

mod decode;
mod request_loop;

use std::sync::Arc;

use tokio::sync::watch;

use crate::cri::CriClient;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nodeview::NodeView;
pub(crate) use decode::pod_group;
pub use decode::{Decoded, NoIdentity, RequestMeta, SpecError, decode};
#[cfg(test)]
pub(crate) use decode::{crd_status_schema, object_from_json, schema_violations};
pub(crate) use request_loop::{RequestController, RequestWatch, run_kind};

/// What every request kind runs with: the agent's own clients, views, health, metrics and
/// shutdown signal, one per agent, cloned into each kind (`<kind>::run(ctx, config)`; the
/// config says what only that kind needs, the node it serves among them).
#[derive(Clone)]
pub struct Context {
    pub client: ::kube::Client,
    /// The kinds that stop or resize containers use it; the rollout does neither.
    pub cri: CriClient,
    /// The newest node view.
    pub views: watch::Receiver<Arc<NodeView>>,
    pub health: Health,
    pub metrics: Metrics,
    /// Turns true once: no new work from then on; the work under way is finished.
    pub shutdown: watch::Receiver<bool>,
}
