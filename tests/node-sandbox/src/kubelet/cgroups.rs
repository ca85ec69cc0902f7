//! Pod cgroups. cgroupfs driver: kubelet creates `<root>/kubepods[/qos]/pod<uid>` with the pod's
//! limits before the sandbox, and rewrites them during an in-place resize; containerd never
//! removes it, so whoever made it cleans up. Limits are written on cgroup v1 only (these
//! machines); on v2 runc just creates the path.
//!
//! systemd driver (the VM of tests/vm): kubelet's libcontainer starts the pod's slice as a
//! transient unit through systemd's D-Bus API with the limits as unit properties, and stops the
//! unit to remove it. The stand-in's own resize (`resize.rs`) is cgroupfs v1 only.

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

/// Creates the pod cgroup in the cpu and memory hierarchies (v1) and writes its limits, or starts
/// the pod slice. Failures are logged, not fatal: the sandbox still runs without pod-level limits.
pub fn create(parent: &str, limits: &PodCgroupLimits) {
    if let Some(slice) = slice_of(parent) {
        if let Err(e) = start_slice(slice, limits) {
            tracing::warn!(slice, error = %e, "starting the pod slice");
        }
        return;
    }
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
    if let Some(slice) = slice_of(parent) {
        let stopped = std::process::Command::new("systemctl")
            .args(["stop", slice])
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            tracing::warn!(slice, "systemctl stop of the pod slice failed");
        }
        return;
    }
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

/// The unit name of a systemd driver's parent (`/a.slice/a-b.slice` → `a-b.slice`).
fn slice_of(parent: &str) -> Option<&str> {
    let leaf = parent.trim_end_matches('/').rsplit('/').next()?;
    leaf.ends_with(".slice").then_some(leaf)
}

/// systemd's "no limit" for MemoryMax, CPUQuotaPerSecUSec and the like.
const INFINITY: u64 = u64::MAX;

/// The unit properties libcontainer's systemd manager gives a slice kubelet creates (its
/// `Apply` and `genV1/V2ResourcesProperties`), as busctl arguments.
fn slice_properties(slice: &str, limits: &PodCgroupLimits, v2: bool) -> Vec<String> {
    // busctl takes each property as name, signature, value; an array value as its length and
    // its items.
    let mut args: Vec<String> = Vec::new();
    let mut count = 0;
    let mut prop = |name: &str, sig: &str, value: &[&str]| {
        count += 1;
        args.push(name.to_owned());
        args.push(sig.to_owned());
        args.extend(value.iter().map(|v| (*v).to_owned()));
    };
    prop(
        "Description",
        "s",
        &[&format!("libcontainer container {slice}")],
    );
    // A slice's parent comes in through Wants= (a scope would use Slice=).
    let parent = match slice.rsplit_once('-') {
        Some((parent, _)) => format!("{parent}.slice"),
        None => "-.slice".to_owned(),
    };
    prop("Wants", "as", &["1", &parent]);
    prop("DefaultDependencies", "b", &["false"]);
    for accounting in [
        "MemoryAccounting",
        "CPUAccounting",
        "IOAccounting",
        "TasksAccounting",
    ] {
        prop(accounting, "b", &["true"]);
    }
    let shares = limits.cpu_shares.clamp(2, 262_144) as u64;
    if v2 {
        // runc's shares → weight conversion (ConvertCPUSharesToCgroupV2Value).
        prop(
            "CPUWeight",
            "t",
            &[&(1 + (shares - 2) * 9999 / 262_142).to_string()],
        );
    } else {
        prop("CPUShares", "t", &[&shares.to_string()]);
    }
    let period = super::spec::CPU_PERIOD as u64;
    prop("CPUQuotaPeriodUSec", "t", &[&period.to_string()]);
    // systemd keeps the quota as whole percents of a CPU: libcontainer rounds up to 10 ms per
    // second so that the children's own cfs quotas still fit.
    let per_sec = match limits.cpu_quota {
        Some(quota) if quota > 0 => (quota as u64 * 1_000_000 / period).div_ceil(10_000) * 10_000,
        _ => INFINITY,
    };
    prop("CPUQuotaPerSecUSec", "t", &[&per_sec.to_string()]);
    let memory = limits.memory_limit.map_or(INFINITY, |m| m.max(0) as u64);
    let memory_property = if v2 { "MemoryMax" } else { "MemoryLimit" };
    prop(memory_property, "t", &[&memory.to_string()]);
    std::iter::once(count.to_string()).chain(args).collect()
}

/// Starts the pod slice as a transient unit (StartTransientUnit through busctl, waiting for the
/// job), as kubelet's systemd driver does before the sandbox.
fn start_slice(slice: &str, limits: &PodCgroupLimits) -> std::io::Result<()> {
    let v2 = Path::new(CGROUP_FS).join("cgroup.controllers").exists();
    let mut command = std::process::Command::new("busctl");
    command.args([
        "call",
        "--timeout=30",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        slice,
        "replace",
    ]);
    command.args(slice_properties(slice, limits, v2));
    command.arg("0");
    let out = command.output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "busctl StartTransientUnit {slice}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_properties_follow_libcontainer() {
        let limits = PodCgroupLimits {
            cpu_shares: 153,
            cpu_quota: Some(30_500),
            memory_limit: Some(96 << 20),
        };
        let list = slice_properties("kubepods-burstable-podx.slice", &limits, true);
        // The count, then each property; the description is one argument.
        assert_eq!(list[..3], ["11", "Description", "s"]);
        assert_eq!(
            list[3],
            "libcontainer container kubepods-burstable-podx.slice"
        );
        let args = list.join(" ");
        assert!(
            args.contains(" Wants as 1 kubepods-burstable.slice "),
            "{args}"
        );
        assert!(args.contains(" CPUWeight t 6 "), "{args}");
        assert!(args.contains(" CPUQuotaPerSecUSec t 310000 "), "{args}");
        assert!(args.ends_with(" MemoryMax t 100663296"), "{args}");
        let open = PodCgroupLimits {
            cpu_shares: 2,
            cpu_quota: None,
            memory_limit: None,
        };
        let args = slice_properties("kubepods-podx.slice", &open, false).join(" ");
        assert!(args.contains(" Wants as 1 kubepods.slice "), "{args}");
        assert!(args.contains(" CPUShares t 2 "), "{args}");
        assert!(
            args.contains(" CPUQuotaPerSecUSec t 18446744073709551615 "),
            "{args}"
        );
        assert!(
            args.ends_with(" MemoryLimit t 18446744073709551615"),
            "{args}"
        );
    }
}
