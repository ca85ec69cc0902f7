//! A thin client for the CRI v1 runtime and image services over a unix socket.

/// Generated CRI v1 protocol types and gRPC stubs (`runtime.v1`).
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
