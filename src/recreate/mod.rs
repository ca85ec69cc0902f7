//! In-place container recreation: the node half of OpenKruise's ContainerRecreateRequest
//! contract (the facts it relies on: `docs/kruise-contract.md`), a drop-in for kruise-daemon's.

mod controller;
pub mod crr;
pub mod journal;
mod kill;
pub mod plan;

pub use controller::{RecreateConfig, crr_resource, run};
/// The kill path (preStop within the grace, then StopContainer), shared with other restarters.
pub(crate) use kill::kill as run_kill;
pub use kill::{StopClaim, StopGate};
