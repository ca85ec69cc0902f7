//! kruise-manager stand-in (in progress).
pub struct ManagerConfig;
pub struct ManagerStandIn;
