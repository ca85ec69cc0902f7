//! Runtime container meta and env-from-metadata restarts: the node half of kruise-manager's
//! in-place update contract (`docs/kruise-contract.md`).
//!
//! - Maintains the pod annotation `apps.kruise.io/runtime-containers-meta` (kruise v1.8's
//!   superset, which v1.9 managers read too) through `pods/status`, for the pods kruise-daemon
//!   serves (controller owner in `apps.kruise.io`, or annotation `kruise.io/sidecarset-hash`)
//!   and for pods opting in with `inplaced.io/runtime-containers-meta: "true"`.
//! - Restarts a container whose env vars from `metadata.labels['k']`/`metadata.annotations['k']`
//!   were started with other values than the pod now gives, while `InPlaceUpdateReady` is False
//!   (kruise pods) or the pod opted in. See [`controller`] for the safety rules.

mod controller;
mod metrics;
pub mod plan;

pub use controller::{ContainerMetaConfig, run};
pub(crate) use metrics::{ContainerMetaMetrics, EnvRestartResult};
pub use plan::{META_ANNOTATION, OPT_IN_ANNOTATION};
