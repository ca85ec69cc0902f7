//! inplaced: a node agent for in-place container restarts and resizes beside the kubelet.
//!
//! One module per capability; `main.rs` only wires them together.

pub mod cri;
pub mod hashing;
