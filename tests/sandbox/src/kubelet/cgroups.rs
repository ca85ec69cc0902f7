//! Pod cgroups (cgroupfs driver): kubelet creates `<root>/kubepods[/qos]/pod<uid>` with the pod's
//! limits before the sandbox; containerd never removes it, so whoever made it cleans up.
//! Limits are written on cgroup v1 only (these machines); on v2 runc just creates the path.

use std::path::{Path, PathBuf};

use super::spec::PodCgroupLimits;

const CGROUP_FS: &str = "/sys/fs/cgroup";

/// Every hierarchy the pod cgroup may appear in (v1 controllers and the v2/unified mount).
fn hierarchies() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(CGROUP_FS)];
    if let Ok(entries) = std::fs::read_dir(CGROUP_FS) {
        for e in entries.flatten() {
            let p = e.path();
            // Skip the co-mount symlinks (cpu → cpu,cpuacct): the real directory is listed too.
            if p.is_dir() && !p.is_symlink() {
                out.push(p);
            }
        }
    }
    out
}

/// Creates the pod cgroup in the cpu and memory hierarchies (v1) and writes its limits.
/// Failures are logged, not fatal: the sandbox still runs without pod-level limits.
pub fn create(parent: &str, limits: &PodCgroupLimits) {
    let rel = parent.trim_start_matches('/');
    let v1_cpu = Path::new(CGROUP_FS).join("cpu");
    let v1_mem = Path::new(CGROUP_FS).join("memory");
    if !v1_cpu.exists() {
        return;
    }
    let write = |dir: &Path, file: &str, value: String| {
        let path = dir.join(file);
        if let Err(e) = std::fs::write(&path, &value) {
            tracing::warn!(path = %path.display(), value, error = %e, "writing pod cgroup");
        }
    };
    let cpu = v1_cpu.join(rel);
    if std::fs::create_dir_all(&cpu).is_ok() {
        write(&cpu, "cpu.shares", limits.cpu_shares.to_string());
        write(
            &cpu,
            "cpu.cfs_period_us",
            super::spec::CPU_PERIOD.to_string(),
        );
        write(
            &cpu,
            "cpu.cfs_quota_us",
            limits.cpu_quota.unwrap_or(-1).to_string(),
        );
    }
    if let Some(limit) = limits.memory_limit {
        let mem = v1_mem.join(rel);
        if std::fs::create_dir_all(&mem).is_ok() {
            write(&mem, "memory.limit_in_bytes", limit.to_string());
        }
    }
}

/// Removes the pod cgroup (and anything left below it) from every hierarchy. Only the pod's own
/// directory: the shared `kubepods/<qos>` parents belong to every sandbox on the machine.
pub fn remove(parent: &str) {
    let rel = parent.trim_start_matches('/');
    if rel.is_empty() || !rel.contains("/pod") {
        return;
    }
    for h in hierarchies() {
        let dir = h.join(rel);
        if dir.is_dir() {
            remove_tree(&dir);
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                remove_tree(&p);
            }
        }
    }
    // A cgroup directory is removed with rmdir (its control files go with it).
    if let Err(e) = std::fs::remove_dir(dir) {
        tracing::debug!(dir = %dir.display(), error = %e, "removing pod cgroup");
    }
}
