//! CRI fault proxy (in progress).
pub struct CriProxy;
pub struct Fault;
pub struct FaultRule;
pub struct Method;
