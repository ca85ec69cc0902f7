//! ContainerRestartRollouts (inplaced.io/v1alpha1): every pod of a selector restarted in place,
//! at most `maxUnavailable` at a time, carried out by the node agents together with no
//! controller of their own. One agent per namespace, elected through a Lease, leads its
//! rollouts: it claims budget for the pods of every node whose agent is alive, in batches, by
//! writing the rollout's status conditioned on its resourceVersion (so that even two agents
//! that both believe they lead are ordered by the API server), and releases each claim once its
//! pod's request has ended. Each node's agent restarts its claimed pods through
//! ContainerRestartRequests and shows it is alive with a Lease of its own.

pub mod budget;
mod census;
pub mod cli;
mod controller;
mod lease;
pub mod object;
pub mod plan;

pub use controller::{RolloutConfig, request_name, rollout_resource, run};
pub use lease::lease_name;
