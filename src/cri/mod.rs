//! A thin client for the CRI v1 runtime and image services over the runtime's unix socket.
//!
//! Every call has a timeout; only idempotent calls are retried (capped exponential backoff with
//! jitter), so a kill or an exec is never sent twice behind the caller's back.

mod client;
mod endpoint;
pub mod labels;
mod metrics;

pub use client::{CriClient, CriConfig, PodLabels, RuntimeInfo};
pub use endpoint::{CriEndpoint, DISCOVERY_ORDER};
pub use metrics::CriCallMetrics;

/// Generated CRI v1 protocol types and gRPC stubs (`runtime.v1`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}

/// Brief views of the list answers: IDs and states only (`proto/inplaced/brief.proto`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod brief {
    tonic::include_proto!("inplaced.brief");
}

use std::time::Duration;

/// Told about every CRI call attempt (for latency metrics); kept as a trait so that this module
/// does not depend on how metrics are exported.
pub trait CallObserver: Send + Sync {
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration);
}

/// What can go wrong talking to the container runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error(
        "no CRI socket found (tried {tried}); pass --cri-endpoint unix:///path/to/runtime.sock"
    )]
    NoEndpoint { tried: String },
    #[error("invalid CRI endpoint {0:?}: expected unix:///absolute/path or /absolute/path")]
    InvalidEndpoint(String),
    #[error(
        "the runtime at {endpoint} does not speak CRI v1 ({detail}); inplaced needs a runtime \
         serving runtime.v1 (containerd >= 1.6, CRI-O >= 1.23, cri-dockerd >= 0.3)"
    )]
    NotCriV1 { endpoint: String, detail: String },
    #[error("CRI runtime at {endpoint} is unavailable ({method}): {detail}")]
    Unavailable {
        endpoint: String,
        method: &'static str,
        detail: String,
    },
    #[error("CRI {method} timed out after {timeout:?}")]
    Timeout {
        method: &'static str,
        timeout: Duration,
    },
    #[error("CRI {method} failed: {code:?}: {message}")]
    Call {
        method: &'static str,
        code: tonic::Code,
        message: String,
    },
}

impl CriError {
    /// True when the call may have not reached the runtime at all, or the runtime went away
    /// mid-call (containerd restarting): worth retrying if the call is idempotent.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CriError::Unavailable { .. } | CriError::Timeout { .. }
        )
    }

    /// The gRPC status code, for metrics labels (`Timeout` counts as DeadlineExceeded).
    pub fn code(&self) -> tonic::Code {
        match self {
            CriError::Call { code, .. } => *code,
            CriError::Timeout { .. } => tonic::Code::DeadlineExceeded,
            CriError::Unavailable { .. } => tonic::Code::Unavailable,
            _ => tonic::Code::FailedPrecondition,
        }
    }

    /// NotFound from the runtime: the container or sandbox is gone.
    pub fn is_not_found(&self) -> bool {
        self.code() == tonic::Code::NotFound
    }

    /// The runtime does not have the method: `Unimplemented`, or one of containerd 1.6's stubs,
    /// which answer `Unknown` with "not implemented".
    pub(crate) fn is_unimplemented(&self) -> bool {
        match self {
            CriError::Call {
                code: tonic::Code::Unimplemented,
                ..
            } => true,
            CriError::Call {
                code: tonic::Code::Unknown,
                message,
                ..
            } => message.contains("not implemented"),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CriError;

    fn call(code: tonic::Code, message: &str) -> CriError {
        CriError::Call {
            method: "GetContainerEvents",
            code,
            message: message.into(),
        }
    }

    #[test]
    fn unimplemented_includes_containerd_1_6_stubs_only() {
        assert!(call(tonic::Code::Unimplemented, "unknown method").is_unimplemented());
        assert!(call(tonic::Code::Unknown, "not implemented").is_unimplemented());
        assert!(!call(tonic::Code::Unknown, "connection reset").is_unimplemented());
        assert!(!call(tonic::Code::Internal, "not implemented").is_unimplemented());
        let timeout = CriError::Timeout {
            method: "GetContainerEvents",
            timeout: std::time::Duration::from_secs(1),
        };
        assert!(!timeout.is_unimplemented());
    }
}
