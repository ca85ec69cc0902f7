//! In-place container recreation: the node half of OpenKruise's ContainerRecreateRequest
//! contract (the facts it relies on: `docs/kruise-contract.md`), a drop-in for kruise-daemon's.
//! The kill, its journal and the stop gate are the shared `restart` machinery.

mod controller;
mod metrics;
pub mod object;
pub mod plan;

pub use controller::{RecreateConfig, crr_resource, run, served_crr_version};
pub(crate) use metrics::ReactionMetrics;
