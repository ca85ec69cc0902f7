//! The local node sandbox for inplaced's end-to-end tests and demo (dev-only, never packaged).
//!
//! - [`kubelet`]: a kubelet stand-in that makes the real containerd follow the pods bound to its
//!   node on the API server double, with kubelet's CRI labels, annotations and stored hashes.
//! - [`manager`]: the part of kruise-manager (and its webhook) that acts on
//!   ContainerRecreateRequests around the node agent.
//! - [`criproxy`]: a CRI server forwarding to containerd that injects faults and counts calls.
//! - [`golden`]: the golden kubelet-hash inputs the end-to-end pods are seeded from.
//!
//! The public API speaks strings, `serde_json` values, k8s-openapi types and endpoints, never
//! inplaced's own types, so that inplaced's integration tests can dev-depend on this crate.

pub mod criproxy;
pub mod golden;
pub mod kubelet;
pub mod manager;
pub mod util;

pub use criproxy::{CriProxy, Fault, FaultRule, RuleId};
pub use kubelet::{KubeletConfig, KubeletStandIn};
pub use manager::{ManagerConfig, ManagerStandIn};
