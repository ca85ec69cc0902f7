//! inplaced: a node agent for in-place container restarts and resizes beside the kubelet.
//!
//! One module per capability; `main.rs` only wires them together.

pub mod admin;
pub mod agent;
pub mod checkpoints;
pub mod config;
pub mod containermeta;
pub mod cri;
pub mod hashing;
pub mod health;
pub(crate) mod http;
pub mod inspect;
pub mod kube;
pub(crate) mod kubelet_config;
pub mod logging;
pub mod metrics;
pub mod nodeview;
pub mod quantity;
pub mod recreate;
pub mod requests;
pub mod resize;
pub mod resources;
pub mod restart;
pub mod restartrequest;
pub mod rollout;
pub mod systemd;
pub(crate) mod table;
pub mod upgrade;
