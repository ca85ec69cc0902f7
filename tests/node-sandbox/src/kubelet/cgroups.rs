//! Pod cgroups (cgroupfs driver): kubelet creates `<root>/kubepods[/qos]/pod<uid>` with the pod's
//! limits before the sandbox, and rewrites them during an in-place resize; containerd never
//! removes it, so whoever made it cleans up. Limits are written on cgroup v1 only (these
//! machines); on v2 runc just creates the path.

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
    if !Path::new(CGROUP_FS).join("cpu").exists() {
        return;
    }
    let logged = |what: &str, result: std::io::Result<()>| {
        if let Err(e) = result {
            tracing::warn!(parent, what, error = %e, "writing pod cgroup");
        }
    };
    logged("cpu.shares", set_cpu_shares(parent, limits.cpu_shares));
    logged(
        "cpu.cfs_period_us",
        write(parent, "cpu", "cpu.cfs_period_us", super::spec::CPU_PERIOD),
    );
    logged("cpu.cfs_quota_us", set_cpu_quota(parent, limits.cpu_quota));
    if limits.memory_limit.is_some() {
        logged(
            "memory.limit_in_bytes",
            set_memory_limit(parent, limits.memory_limit),
        );
    }
}

/// "No limit" as cgroup v1 files take it.
const UNLIMITED: i64 = -1;

fn file(parent: &str, controller: &str, name: &str) -> PathBuf {
    Path::new(CGROUP_FS)
        .join(controller)
        .join(parent.trim_start_matches('/'))
        .join(name)
}

/// Writes a control file, creating the cgroup (a directory) first where it is missing.
fn write(parent: &str, controller: &str, name: &str, value: i64) -> std::io::Result<()> {
    let path = file(parent, controller, name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, value.to_string())
}

fn read(parent: &str, controller: &str, name: &str) -> std::io::Result<i64> {
    let path = file(parent, controller, name);
    let text = std::fs::read_to_string(&path)?;
    text.trim().parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

pub fn set_cpu_shares(parent: &str, shares: i64) -> std::io::Result<()> {
    write(parent, "cpu", "cpu.shares", shares)
}

/// `None`: no quota.
pub fn set_cpu_quota(parent: &str, quota: Option<i64>) -> std::io::Result<()> {
    write(
        parent,
        "cpu",
        "cpu.cfs_quota_us",
        quota.unwrap_or(UNLIMITED),
    )
}

/// `None`: no limit.
pub fn set_memory_limit(parent: &str, limit: Option<i64>) -> std::io::Result<()> {
    write(
        parent,
        "memory",
        "memory.limit_in_bytes",
        limit.unwrap_or(UNLIMITED),
    )
}

/// What the pod cgroup holds now, limits as ordered values (no limit = `i64::MAX`), so that a
/// resize can tell growing from shrinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCgroupNow {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub memory_limit: i64,
}

pub fn read_pod(parent: &str) -> std::io::Result<PodCgroupNow> {
    let unlimited_if_negative = |v: i64| if v < 0 { i64::MAX } else { v };
    Ok(PodCgroupNow {
        cpu_shares: read(parent, "cpu", "cpu.shares")?,
        cpu_quota: unlimited_if_negative(read(parent, "cpu", "cpu.cfs_quota_us")?),
        // A pod without a memory limit has no memory cgroup of its own.
        memory_limit: match read(parent, "memory", "memory.limit_in_bytes") {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => i64::MAX,
            Err(e) => return Err(e),
        },
    })
}

/// Memory in use (`memory.usage_in_bytes`) of the cgroup at `path` (a pod cgroup parent, or
/// `<parent>/<container id>` for a container); 0 where there is no memory cgroup.
pub fn memory_usage(path: &str) -> std::io::Result<i64> {
    match read(path, "memory", "memory.usage_in_bytes") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        other => other,
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
