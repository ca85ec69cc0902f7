//! In-place restarts without OpenKruise: ContainerRestartRequests (inplaced.io/v1alpha1), which
//! the node agent carries out alone (stop through the shared kill path, then follow the new
//! container until the pod reports it ready), and the `inplaced restart` client, which makes one
//! (or, with a selector, a ContainerRestartRollout that the agents carry out: `crate::rollout`).

pub mod cli;
mod controller;
pub mod object;
pub mod plan;

pub use controller::{RestartRequestConfig, restart_request_resource, run};
