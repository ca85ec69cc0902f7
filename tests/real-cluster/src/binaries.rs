//! Where a release's binaries are: `tests/kube/build.sh --bin RELEASE` names the cache directory
//! (keyed by the release's go.mod and go.sum); the build leaves `.complete` there when every
//! binary is in place.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

#[derive(Debug, Clone)]
pub struct Binaries {
    release: String,
    dir: PathBuf,
    version: String,
}

/// The script that builds the binaries and knows where they are.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kube/build.sh")
}

impl Binaries {
    /// The built binaries of `release` ("1.36", "1.32"); an error that says how to build them
    /// when they are not there.
    pub fn of(release: &str) -> anyhow::Result<Binaries> {
        let output = Command::new(build_script())
            .args(["--bin", release])
            .output()
            .context("running tests/kube/build.sh --bin")?;
        if !output.status.success() {
            bail!(
                "tests/kube/build.sh --bin {release}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if !dir.join(".complete").exists() {
            bail!(
                "the real Kubernetes {release} binaries are not built ({} is incomplete): run \
                 tests/kube/build.sh {release} (tests/run-all.sh does)",
                dir.display()
            );
        }
        let version = std::fs::read_to_string(dir.join("VERSION"))
            .with_context(|| format!("{}/VERSION", dir.display()))?
            .trim()
            .to_string();
        Ok(Binaries {
            release: release.to_string(),
            dir,
            version,
        })
    }

    /// helm and krew, built from `tests/kube/k8s-tools` as the release "tools"
    /// (`tests/kube/build.sh tools`); `version()` names both.
    pub fn tools() -> anyhow::Result<Binaries> {
        Binaries::of("tools")
    }

    /// The path of one binary (kube-apiserver, kubelet, kube-controller-manager, kube-scheduler, kubectl, etcd,
    /// kruise-manager; helm, krew), checked to exist.
    pub fn path(&self, name: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        if !path.exists() {
            bail!(
                "Kubernetes {} has no {name} in {}",
                self.release,
                self.dir.display()
            );
        }
        Ok(path)
    }

    /// The exact version built, e.g. `v1.36.3` (the tools: `helm v4.3.2, krew v0.4.3`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The directory of the binaries (and of what the build copied beside them).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn release(&self) -> &str {
        &self.release
    }
}
