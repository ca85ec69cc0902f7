//! Real Kubernetes for inplaced's tests, the envtest way: the real etcd, kube-apiserver and
//! kube-controller-manager of a release ([`ControlPlane`]), real kubelets each on a containerd of
//! its own ([`RealNode`]), started and torn down by the tests' own code. The binaries are built
//! from Go modules by `tests/kube/build.sh` into a cache outside the work tree ([`Binaries`]).
//!
//! Everything listens on loopback, except each kubelet, which needs a node IP that is not
//! loopback: a /32 of the benchmarking range (198.18.0.0/15, RFC 2544) added to `lo` for the
//! node's life, so that its traffic, too, never leaves the machine.
//! What this starts it ends, by PID (a process group each), and removes what it wrote.

mod binaries;
mod control_plane;
mod kruise;
mod node;
mod pki;
mod process;

pub use binaries::Binaries;
pub use control_plane::{ControlPlane, ControlPlaneConfig, SELF_NODE_CLIENT_BINDING, client_from};
pub use kruise::{KruiseManager, WEBHOOK_NAMESPACE_LABEL};
pub use node::{NodeConfig, RealNode};
pub use pki::{Ca, Credential};
pub use process::{Component, Exited, wait_until};

/// The newest release the tier runs, and the one before the 1.33 resize beta.
pub const NEWEST: &str = "1.36";
pub const BEFORE_RESIZE_BETA: &str = "1.32";

/// A CRD of the OpenKruise release the tier builds (v1.9.0), as kruise ships it
/// (`config/crd/bases/<file>`, copied beside the binaries by tests/kube/build.sh).
pub fn kruise_crd(file: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = Binaries::of(BEFORE_RESIZE_BETA)?
        .dir()
        .join("kruise-crds")
        .join(file);
    if !path.exists() {
        anyhow::bail!("no kruise CRD {}", path.display());
    }
    Ok(path)
}
