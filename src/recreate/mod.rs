//! In-place container recreation: the node half of OpenKruise's ContainerRecreateRequest
//! contract (see `shared/reference/kruise-compat.md`), a drop-in for kruise-daemon's.

pub mod crr;
pub mod journal;
pub mod plan;
