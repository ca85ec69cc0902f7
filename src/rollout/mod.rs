//! ContainerRestartRollouts (inplaced.io/v1alpha1): every pod of a selector restarted in place,
//! at most `maxUnavailable` at a time, carried out by the node agents together with no
//! controller of their own. Each agent claims budget for its own node's pods by writing the
//! rollout's status conditioned on its resourceVersion (the API server orders every node's
//! claims), restarts each claimed pod through a ContainerRestartRequest, and releases the claim
//! once the pod is ready again. Agents show they are alive with a Lease; the claims of an agent
//! that is gone are released by the others once their pods are ready again or gone.

pub mod budget;
mod census;
pub mod cli;
mod controller;
pub mod object;
pub mod plan;

pub use controller::{RolloutConfig, lease_name, request_name, rollout_resource, run};
