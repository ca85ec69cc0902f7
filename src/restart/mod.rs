//! The restart machinery every restarter shares (ContainerRecreateRequests,
//! ContainerRestartRequests, env-from-metadata restarts): the kill itself (preStop within the
//! grace, then StopContainer), the journal that keeps "at most one kill" true across agent
//! restarts, the gate that keeps two restarters from stopping one container, the ledger that
//! records who killed a container, and the tracker that times every restart on the node from
//! the runtime's clocks (`inplaced_restart_*` metrics).
//!
//! A restarter takes the gate and the ledger as required arguments (the agent makes one of each),
//! keeps a journal of its own, and starts each kill with a claim from the gate through
//! [`Restarter::prepare`] (which clears it with [`prepare_kill`]) and [`ReadyKill::launch`].

pub(crate) mod backoff;
mod gate;
mod hook;
mod journal;
mod kill;
mod kubelet_process;
mod ledger;
mod metrics;
mod prepare;
mod start;
mod tracker;

pub use gate::{StopClaim, StopGate};
pub use hook::{
    ContainerPort, DEFAULT_TERMINATION_GRACE_SECONDS, ExecAction, HttpGetAction, HttpHeader,
    IntOrString, MIN_STOP_GRACE_SECONDS, PreStop, SleepAction, TcpSocketAction,
};
pub use journal::{JournalError, KillIntent, KillJournal, Unsynced};
pub(crate) use kill::{KillDone, RequestKills};
pub use kill::{KillError, KillOrder, KillOutcome, kill};
pub use kubelet_process::KubeletProcess;
pub use ledger::KillLedger;
pub(crate) use metrics::{RestartMetrics, RestartPhase, RestartResult};
pub use prepare::{NotPrepared, Prepared, prepare_kill};
pub(crate) use start::{ReadyKill, Restarter};
pub use tracker::RestartTracker;
