//! Pod and container cgroups: paths for the cgroupfs and systemd drivers on cgroup v1 and v2
//! (the kubelet conventions and arithmetic they follow: `docs/kubelet-resize.md`).
//!
//! Reads and writes the cpu and memory control files kubelet manages for a pod
//! (`ResourceConfigForPod`) and reads those the runtime manages for a container. Every write is
//! read back: what the kernel applied is what counts.
//!
//! Paths:
//! - the pod cgroup is named by the sandbox's CRI `cgroup_parent`: `/kubepods/burstable/pod<uid>`
//!   (cgroupfs driver) or a slice, `kubepods-burstable-pod<uid_>.slice` or its expanded form
//!   (systemd driver; the slice is expanded as systemd does: `a-b.slice` lives in
//!   `a.slice/a-b.slice`);
//! - a container cgroup is named by the OCI `linux.cgroupsPath` of its spec:
//!   `/kubepods/burstable/pod<uid>/<id>` or `<slice>:<prefix>:<id>` (runc's systemd form, the
//!   scope `<prefix>-<id>.scope` inside the slice);
//! - v1 keeps each controller in its own hierarchy (`<root>/cpu/<path>`, or `cpu,cpuacct`;
//!   `<root>/memory/<path>`), v2 has one (`<root>/<path>`).
//!
//! Values: cpu shares, cfs quota / period (µs) and the memory limit (bytes), as kubelet reads
//! them. On v2, `cpu.weight` is converted from and back to shares with the formulas of runc
//! (shares → weight: `1 + (shares - 2) * 9999 / 262142`) and kubelet (weight → shares:
//! `(weight - 1) * 262142 / 9999 + 2`); the round trip is lossy (102 shares → weight 4 → 80).
//! The kernel keeps memory limits in whole pages: a limit reads back rounded down to the page
//! size, which [`applied_memory_limit`] predicts.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::resources;

/// Where cgroup filesystems are mounted on every distribution kubelet supports.
pub(crate) const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// Kernel bounds of cpu.shares (kubelet's MinShares / MaxShares) and of cpu.weight.
const MIN_SHARES: u64 = resources::MIN_SHARES as u64;
const MAX_SHARES: u64 = resources::MAX_SHARES as u64;
const MAX_WEIGHT: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CgroupVersion {
    V1,
    V2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    /// The driver that named a sandbox's CRI `cgroup_parent`: slices are systemd's.
    pub(crate) fn of_parent(parent: &str) -> Self {
        if parent.trim_end_matches('/').ends_with(".slice") {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }

    /// The driver that named a container's OCI `cgroupsPath`: runc's systemd form has colons.
    pub(crate) fn of_cgroups_path(cgroups_path: &str) -> Self {
        if cgroups_path.contains(':') {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }
}

/// One of the pod cgroup's two cpu settings: kubelet writes each when its own value grows or
/// shrinks, the shares by the pod's requests and the quota by its limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodCpu {
    Shares(u64),
    /// cgroup v2's cpu.weight as it was read, to put it back exactly (shares read from a weight
    /// do not convert back to the same weight).
    Weight(u64),
    /// The cfs quota (None = unlimited) with its period.
    Quota {
        quota: Option<i64>,
        period: u64,
    },
}

/// The cpu and memory values of one cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CgroupValues {
    /// cpu.shares; on v2 cpu.weight converted back as kubelet converts it (see module docs).
    pub cpu_shares: Option<u64>,
    /// cpu.weight as read (v2 only).
    pub cpu_weight: Option<u64>,
    /// cfs quota in µs; None = unlimited (-1 / "max").
    pub cpu_quota: Option<i64>,
    /// cfs period in µs.
    pub cpu_period: Option<u64>,
    /// Bytes; None = unlimited.
    pub memory_limit: Option<i64>,
}

impl CgroupValues {
    /// How `shares` compares with the cpu shares set now, in the cgroup's own units (on v2 the
    /// weight runc writes for them); `None` when they were not read.
    pub(crate) fn compare_shares(&self, shares: u64) -> Option<std::cmp::Ordering> {
        match (self.cpu_weight, self.cpu_shares) {
            (Some(weight), _) => Some(shares_to_weight(shares).cmp(&weight)),
            (None, Some(now)) => Some(shares.cmp(&now)),
            (None, None) => None,
        }
    }

    /// The setting that puts the cpu shares back exactly as they were read.
    pub(crate) fn shares_setting(&self) -> Option<PodCpu> {
        self.cpu_weight
            .map(PodCpu::Weight)
            .or(self.cpu_shares.map(PodCpu::Shares))
    }
}

/// A control file that could not be read, written or understood.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
    #[error("{path} holds {contents:?}, expected {expected}")]
    Parse {
        path: PathBuf,
        contents: String,
        expected: &'static str,
    },
    #[error("wrote {written:?} to {path} but it reads back {read:?}")]
    Mismatch {
        path: PathBuf,
        written: String,
        read: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CpuError {
    #[error("cpu controller: {0}")]
    File(#[from] FileError),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MemoryError {
    #[error("memory controller: {0}")]
    File(#[from] FileError),
    /// cgroup v1 refuses (EBUSY) a limit it cannot reclaim down to.
    #[error(
        "memory controller: the kernel refused the limit of {limit} bytes in {path} because the cgroup uses more than that and cannot reclaim it (EBUSY)"
    )]
    LimitBelowUsage { path: PathBuf, limit: i64 },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CgroupError {
    #[error("cgroup root {root}: {source}")]
    Root { root: PathBuf, source: io::Error },
    #[error("cgroup path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("no {controller} controller hierarchy under {root}")]
    NoController {
        controller: &'static str,
        root: PathBuf,
    },
    #[error(transparent)]
    Cpu(#[from] CpuError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// The cgroup filesystem of this node.
#[derive(Clone, Debug)]
pub(crate) struct Cgroups {
    root: PathBuf,
    version: CgroupVersion,
}

#[derive(Clone, Copy)]
enum CgroupController {
    Cpu,
    Memory,
}

impl CgroupController {
    fn name(self) -> &'static str {
        match self {
            CgroupController::Cpu => "cpu",
            CgroupController::Memory => "memory",
        }
    }

    /// v1 hierarchy directories that hold the controller, in the order to try.
    fn v1_dirs(self) -> &'static [&'static str] {
        match self {
            CgroupController::Cpu => &["cpu", "cpu,cpuacct", "cpuacct,cpu"],
            CgroupController::Memory => &["memory"],
        }
    }
}

impl Cgroups {
    /// The version mounted at `root`: v2 when `root` is the unified hierarchy itself
    /// (`cgroup.controllers` at its top); v1 otherwise, including hybrid setups whose v2 mount
    /// sits below the root (`unified/`).
    pub(crate) fn detect(root: &Path) -> Result<Self, CgroupError> {
        let root_error = |source| CgroupError::Root {
            root: root.to_owned(),
            source,
        };
        if !fs::metadata(root).map_err(root_error)?.is_dir() {
            return Err(root_error(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        let unified = root
            .join("cgroup.controllers")
            .try_exists()
            .map_err(root_error)?;
        let version = if unified {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        };
        Ok(Cgroups::with_version(root, version))
    }

    /// A given version at `root` (for fixtures).
    pub fn with_version(root: impl Into<PathBuf>, version: CgroupVersion) -> Self {
        Cgroups {
            root: root.into(),
            version,
        }
    }

    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The pod cgroup's values, given the sandbox's CRI `cgroup_parent`.
    pub fn read_pod(&self, parent: &str) -> Result<CgroupValues, CgroupError> {
        self.read_values(&pod_cgroup_dir(parent)?)
    }

    /// The container cgroup's values, given its OCI `cgroupsPath`.
    pub(crate) fn read_container(&self, cgroups_path: &str) -> Result<CgroupValues, CgroupError> {
        self.read_values(&container_cgroup_dir(cgroups_path)?)
    }

    /// Bytes the pod cgroup uses now (v1 memory.usage_in_bytes, v2 memory.current).
    pub(crate) fn pod_memory_usage(&self, parent: &str) -> Result<u64, CgroupError> {
        self.memory_usage(&pod_cgroup_dir(parent)?)
    }

    /// Bytes the container cgroup uses now.
    pub(crate) fn container_memory_usage(&self, cgroups_path: &str) -> Result<u64, CgroupError> {
        self.memory_usage(&container_cgroup_dir(cgroups_path)?)
    }

    /// Sets one of the pod cgroup's cpu settings, read back. On v2 the shares are written as
    /// the cpu.weight runc would write for them (shares outside the kernel's range are clamped
    /// first, as the v1 kernel clamps them) and a weight as it is; on v1 a weight is written as
    /// the shares kubelet reads it as.
    pub(crate) fn write_pod_cpu(&self, parent: &str, setting: PodCpu) -> Result<(), CgroupError> {
        let dir = self.controller_dir(CgroupController::Cpu, &pod_cgroup_dir(parent)?)?;
        let result = match (self.version, setting) {
            (CgroupVersion::V1, PodCpu::Shares(shares)) => {
                write_checked(&dir.join("cpu.shares"), &shares.to_string())
            }
            (CgroupVersion::V1, PodCpu::Weight(weight)) => write_checked(
                &dir.join("cpu.shares"),
                &weight_to_shares(weight.clamp(1, MAX_WEIGHT)).to_string(),
            ),
            (CgroupVersion::V2, PodCpu::Weight(weight)) => write_checked(
                &dir.join("cpu.weight"),
                &weight.clamp(1, MAX_WEIGHT).to_string(),
            ),
            (CgroupVersion::V1, PodCpu::Quota { quota, period }) => {
                write_v1_cpu_quota(&dir, quota, period)
            }
            (CgroupVersion::V2, PodCpu::Shares(shares)) => write_checked(
                &dir.join("cpu.weight"),
                &shares_to_weight(shares).to_string(),
            ),
            (CgroupVersion::V2, PodCpu::Quota { quota, period }) => {
                let quota = quota.map_or_else(|| "max".to_owned(), |q| q.to_string());
                write_checked(&dir.join("cpu.max"), &format!("{quota} {period}"))
            }
        };
        Ok(result.map_err(CpuError::from)?)
    }

    /// Sets the pod cgroup's memory limit (None = unlimited) and returns the limit the kernel
    /// applied (rounded down to whole pages, see [`applied_memory_limit`]). On v1 a limit below
    /// what the cgroup uses fails with [`MemoryError::LimitBelowUsage`]; v2 takes it and
    /// reclaims, or OOM-kills.
    pub(crate) fn write_pod_memory(
        &self,
        parent: &str,
        limit: Option<i64>,
    ) -> Result<Option<i64>, CgroupError> {
        let dir = self.controller_dir(CgroupController::Memory, &pod_cgroup_dir(parent)?)?;
        let (file, text) = match (self.version, limit) {
            (CgroupVersion::V1, Some(bytes)) => ("memory.limit_in_bytes", bytes.to_string()),
            (CgroupVersion::V1, None) => ("memory.limit_in_bytes", "-1".to_owned()),
            (CgroupVersion::V2, Some(bytes)) => ("memory.max", bytes.to_string()),
            (CgroupVersion::V2, None) => ("memory.max", "max".to_owned()),
        };
        let path = dir.join(file);
        if let Err(source) = fs::write(&path, &text) {
            if let (CgroupVersion::V1, Some(limit)) = (self.version, limit)
                && source.raw_os_error() == Some(EBUSY)
            {
                return Err(MemoryError::LimitBelowUsage { path, limit }.into());
            }
            return Err(MemoryError::from(FileError::Write {
                path,
                value: text,
                source,
            })
            .into());
        }
        let applied = match self.version {
            CgroupVersion::V1 => read_v1_memory_limit(&dir),
            CgroupVersion::V2 => read_v2_memory_limit(&dir),
        }
        .map_err(MemoryError::from)?;
        if applied != limit.map(applied_memory_limit) {
            return Err(MemoryError::from(FileError::Mismatch {
                path,
                written: text,
                read: applied.map_or_else(|| "unlimited".to_owned(), |b| b.to_string()),
            })
            .into());
        }
        Ok(applied)
    }

    fn read_values(&self, rel: &Path) -> Result<CgroupValues, CgroupError> {
        let cpu = self.controller_dir(CgroupController::Cpu, rel)?;
        let memory = self.controller_dir(CgroupController::Memory, rel)?;
        let values = match self.version {
            CgroupVersion::V1 => {
                let (shares, quota, period) = read_v1_cpu(&cpu).map_err(CpuError::from)?;
                let limit = read_v1_memory_limit(&memory).map_err(MemoryError::from)?;
                (shares, None, quota, period, limit)
            }
            CgroupVersion::V2 => {
                let (weight, quota, period) = read_v2_cpu(&cpu).map_err(CpuError::from)?;
                let limit = read_v2_memory_limit(&memory).map_err(MemoryError::from)?;
                (weight_to_shares(weight), Some(weight), quota, period, limit)
            }
        };
        let (shares, weight, quota, period, limit) = values;
        Ok(CgroupValues {
            cpu_shares: Some(shares),
            cpu_weight: weight,
            cpu_quota: quota,
            cpu_period: Some(period),
            memory_limit: limit,
        })
    }

    fn memory_usage(&self, rel: &Path) -> Result<u64, CgroupError> {
        let dir = self.controller_dir(CgroupController::Memory, rel)?;
        let file = match self.version {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        };
        let path = dir.join(file);
        let text = read(&path).map_err(MemoryError::from)?;
        Ok(parse_u64(&path, &text, "a byte count").map_err(MemoryError::from)?)
    }

    /// Where `controller`'s files of the cgroup `rel` live.
    fn controller_dir(
        &self,
        controller: CgroupController,
        rel: &Path,
    ) -> Result<PathBuf, CgroupError> {
        match self.version {
            CgroupVersion::V2 => Ok(self.root.join(rel)),
            CgroupVersion::V1 => controller
                .v1_dirs()
                .iter()
                .map(|name| self.root.join(name))
                .find(|dir| dir.is_dir())
                .map(|dir| dir.join(rel))
                .ok_or_else(|| CgroupError::NoController {
                    controller: controller.name(),
                    root: self.root.clone(),
                }),
        }
    }
}

const EBUSY: i32 = 16;

/// The limit the kernel keeps for `bytes`: whole pages, rounded down.
pub(crate) fn applied_memory_limit(bytes: i64) -> i64 {
    let page = page_size() as i64;
    bytes - bytes.rem_euclid(page)
}

/// The page size from the kernel's auxiliary vector (AT_PAGESZ), read once.
fn page_size() -> u64 {
    const AT_PAGESZ: u64 = 6;
    static PAGE_SIZE: OnceLock<u64> = OnceLock::new();
    *PAGE_SIZE.get_or_init(|| {
        let auxv = fs::read("/proc/self/auxv").unwrap_or_default();
        auxv.chunks_exact(16)
            .map(|pair| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                (word(&pair[..8]), word(&pair[8..]))
            })
            .find(|&(key, _)| key == AT_PAGESZ)
            .map(|(_, size)| size)
            .filter(|&size| size.is_power_of_two())
            // Every architecture kubelet runs on has at least 4 KiB pages.
            .unwrap_or(4096)
    })
}

/// The pod slice a systemd driver's `cgroup_parent` names, in either form
/// (`/a.slice/a-b.slice` or `a-b.slice` → `a-b.slice`); None for a cgroupfs parent.
pub(crate) fn pod_slice(parent: &str) -> Option<&str> {
    match CgroupDriver::of_parent(parent) {
        CgroupDriver::Systemd => parent.trim_end_matches('/').rsplit('/').next(),
        CgroupDriver::Cgroupfs => None,
    }
}

/// The pod cgroup's path below a controller's root, from the sandbox's CRI `cgroup_parent`.
pub(crate) fn pod_cgroup_dir(parent: &str) -> Result<PathBuf, CgroupError> {
    match pod_slice(parent) {
        Some(slice) => relative(&expand_slice(slice)?, parent),
        None => relative(parent, parent),
    }
}

/// A container cgroup's path below a controller's root, from its OCI `cgroupsPath`.
pub(crate) fn container_cgroup_dir(cgroups_path: &str) -> Result<PathBuf, CgroupError> {
    match CgroupDriver::of_cgroups_path(cgroups_path) {
        CgroupDriver::Systemd => {
            let invalid = |reason| CgroupError::InvalidPath {
                path: cgroups_path.to_owned(),
                reason,
            };
            let mut parts = cgroups_path.split(':');
            let (Some(slice), Some(prefix), Some(name), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(invalid("expected <slice>:<prefix>:<name>"));
            };
            if prefix.is_empty() || name.is_empty() || name.contains('/') || prefix.contains('/') {
                return Err(invalid("expected <slice>:<prefix>:<name>"));
            }
            let expanded = expand_slice(slice)?;
            let mut dir = relative(&expanded, cgroups_path)?;
            dir.push(format!("{prefix}-{name}.scope"));
            Ok(dir)
        }
        CgroupDriver::Cgroupfs => relative(cgroups_path, cgroups_path),
    }
}

/// systemd's slice expansion: `a-b-c.slice` is `/a.slice/a-b.slice/a-b-c.slice`, `-.slice` is
/// the root.
pub(crate) fn expand_slice(slice: &str) -> Result<String, CgroupError> {
    let invalid = |reason| CgroupError::InvalidPath {
        path: slice.to_owned(),
        reason,
    };
    let name = slice
        .strip_suffix(".slice")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("a slice name ends in .slice"))?;
    if slice.contains('/') {
        return Err(invalid("a slice name has no '/'"));
    }
    if name == "-" {
        return Ok("/".to_owned());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in name.split('-') {
        if component.is_empty() {
            return Err(invalid("a slice name has no empty '-' components"));
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(".slice");
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

/// `path` (absolute or not) as a relative path that stays below the cgroup root.
fn relative(path: &str, original: &str) -> Result<PathBuf, CgroupError> {
    let invalid = |reason| CgroupError::InvalidPath {
        path: original.to_owned(),
        reason,
    };
    if path.contains('\0') {
        return Err(invalid("contains a NUL byte"));
    }
    let mut out = PathBuf::new();
    for component in path.split('/').filter(|c| !c.is_empty()) {
        if component == "." || component == ".." {
            return Err(invalid("'.' and '..' are not allowed"));
        }
        out.push(component);
    }
    if out.as_os_str().is_empty() {
        return Err(invalid("names no cgroup below the root"));
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, FileError> {
    fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })
}

fn write(path: &Path, value: &str) -> Result<(), FileError> {
    fs::write(path, value).map_err(|source| FileError::Write {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })
}

/// Writes `value` and checks that the file reads back exactly that.
fn write_checked(path: &Path, value: &str) -> Result<(), FileError> {
    write(path, value)?;
    let read_back = read(path)?;
    if read_back.trim() != value {
        return Err(FileError::Mismatch {
            path: path.to_owned(),
            written: value.to_owned(),
            read: read_back.trim().to_owned(),
        });
    }
    Ok(())
}

fn parse_error(path: &Path, text: &str, expected: &'static str) -> FileError {
    FileError::Parse {
        path: path.to_owned(),
        contents: text.to_owned(),
        expected,
    }
}

/// A control file holding one number (the kernel ends it with a newline).
fn parse_u64(path: &Path, text: &str, expected: &'static str) -> Result<u64, FileError> {
    text.trim()
        .parse()
        .map_err(|_| parse_error(path, text, expected))
}

fn parse_i64(path: &Path, text: &str, expected: &'static str) -> Result<i64, FileError> {
    text.trim()
        .parse()
        .map_err(|_| parse_error(path, text, expected))
}

fn read_u64(dir: &Path, file: &str, expected: &'static str) -> Result<u64, FileError> {
    let path = dir.join(file);
    parse_u64(&path, &read(&path)?, expected)
}

fn read_v1_cpu(dir: &Path) -> Result<(u64, Option<i64>, u64), FileError> {
    let shares = read_u64(dir, "cpu.shares", "a share count")?;
    let period = read_u64(dir, "cpu.cfs_period_us", "a period in µs")?;
    let quota_path = dir.join("cpu.cfs_quota_us");
    let text = read(&quota_path)?;
    let quota = match parse_i64(&quota_path, &text, "-1 or a quota in µs")? {
        -1 => None,
        q if q > 0 => Some(q),
        _ => return Err(parse_error(&quota_path, &text, "-1 or a quota in µs")),
    };
    Ok((shares, quota, period))
}

fn write_v1_cpu_quota(dir: &Path, quota: Option<i64>, period: u64) -> Result<(), FileError> {
    // The period only changes when asked to: rewriting it is a needless kernel validation.
    if read_u64(dir, "cpu.cfs_period_us", "a period in µs")? != period {
        write_checked(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
    }
    let quota = quota.map_or_else(|| "-1".to_owned(), |q| q.to_string());
    write_checked(&dir.join("cpu.cfs_quota_us"), &quota)
}

/// v1 reports "no limit" as the largest page multiple that fits an i64 (the page counter's
/// maximum); anything from there up is unlimited, and so is the `-1` one writes for it (which
/// a plain file, as in test fixtures, reads back verbatim).
fn read_v1_memory_limit(dir: &Path) -> Result<Option<i64>, FileError> {
    const EXPECTED: &str = "a byte count";
    let path = dir.join("memory.limit_in_bytes");
    let text = read(&path)?;
    if text.trim() == "-1" {
        return Ok(None);
    }
    let bytes = parse_u64(&path, &text, EXPECTED)?;
    let unlimited_from = i64::MAX as u64 / page_size() * page_size();
    Ok((bytes < unlimited_from).then_some(bytes as i64))
}

fn read_v2_memory_limit(dir: &Path) -> Result<Option<i64>, FileError> {
    let path = dir.join("memory.max");
    let text = read(&path)?;
    match text.trim() {
        "max" => Ok(None),
        t => t
            .parse::<i64>()
            .ok()
            .filter(|&b| b >= 0)
            .map(Some)
            .ok_or_else(|| parse_error(&path, &text, "\"max\" or a byte count")),
    }
}

/// kubelet's reading of cpu.weight as shares.
pub(crate) fn weight_to_shares(weight: u64) -> u64 {
    (weight - 1) * (MAX_SHARES - MIN_SHARES) / (MAX_WEIGHT - 1) + MIN_SHARES
}

/// runc's cpu.weight for shares (clamped to the kernel's shares range first).
pub(crate) fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + (shares - MIN_SHARES) * (MAX_WEIGHT - 1) / (MAX_SHARES - MIN_SHARES)
}

fn read_v2_cpu(dir: &Path) -> Result<(u64, Option<i64>, u64), FileError> {
    let weight_path = dir.join("cpu.weight");
    let text = read(&weight_path)?;
    let weight = parse_u64(&weight_path, &text, "a weight in 1..10000")?;
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(parse_error(&weight_path, &text, "a weight in 1..10000"));
    }
    let (quota, period) = read_cpu_max(&dir.join("cpu.max"))?;
    Ok((weight, quota, period))
}

/// cpu.max: `"<quota|max> <period>"`.
fn read_cpu_max(path: &Path) -> Result<(Option<i64>, u64), FileError> {
    const EXPECTED: &str = "\"<quota|max> <period>\"";
    let text = read(path)?;
    let mut fields = text.split_whitespace();
    let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(parse_error(path, &text, EXPECTED));
    };
    let quota = match quota {
        "max" => None,
        q => Some(
            q.parse::<i64>()
                .ok()
                .filter(|&q| q > 0)
                .ok_or_else(|| parse_error(path, &text, EXPECTED))?,
        ),
    };
    let period = period
        .parse::<u64>()
        .map_err(|_| parse_error(path, &text, EXPECTED))?;
    Ok((quota, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD_UID: &str = "5f3c6a2e-8d1b-4c47-9f2a-0b6e7d9c1a34";
    const APP_ID: &str = "3b8e1f0c9a7d4e2b6c5a8f1d0e9b7c6a5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a";
    const SIDECAR_ID: &str = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d";

    fn quota(quota: Option<i64>) -> PodCpu {
        PodCpu::Quota {
            quota,
            period: 100_000,
        }
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cgroup")
            .join(name)
    }

    /// A writable copy of a fixture tree (writes must never touch the checked-in files).
    fn copy_of(name: &str) -> tempfile::TempDir {
        fn copy_dir(from: &Path, to: &Path) {
            fs::create_dir_all(to).expect("create fixture copy");
            for entry in fs::read_dir(from).expect("read fixture dir") {
                let entry = entry.expect("fixture entry");
                let target = to.join(entry.file_name());
                if entry.file_type().expect("file type").is_dir() {
                    copy_dir(&entry.path(), &target);
                } else {
                    fs::copy(entry.path(), &target).expect("copy fixture file");
                }
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(&fixture(name), dir.path());
        dir
    }

    fn cgroupfs_parent() -> String {
        format!("/kubepods/burstable/pod{POD_UID}")
    }

    fn systemd_parent() -> String {
        format!("kubepods-burstable-pod{}.slice", POD_UID.replace('-', "_"))
    }

    fn container_path(driver: CgroupDriver, id: &str) -> String {
        match driver {
            CgroupDriver::Cgroupfs => format!("{}/{id}", cgroupfs_parent()),
            CgroupDriver::Systemd => format!("{}:cri-containerd:{id}", systemd_parent()),
        }
    }

    fn parent(driver: CgroupDriver) -> String {
        match driver {
            CgroupDriver::Cgroupfs => cgroupfs_parent(),
            CgroupDriver::Systemd => systemd_parent(),
        }
    }

    const FIXTURES: [(&str, CgroupVersion, CgroupDriver); 4] = [
        ("v1-cgroupfs", CgroupVersion::V1, CgroupDriver::Cgroupfs),
        ("v1-systemd", CgroupVersion::V1, CgroupDriver::Systemd),
        ("v2-cgroupfs", CgroupVersion::V2, CgroupDriver::Cgroupfs),
        ("v2-systemd", CgroupVersion::V2, CgroupDriver::Systemd),
    ];

    #[test]
    fn detects_the_version() {
        for (name, version, _) in FIXTURES {
            let cgroups = Cgroups::detect(&fixture(name)).expect("fixture root");
            assert_eq!(cgroups.version(), version, "{name}");
        }
        let missing = Cgroups::detect(Path::new("/nonexistent/cgroup")).expect_err("missing");
        assert!(
            missing.to_string().contains("No such file or directory"),
            "{missing}"
        );
    }

    #[test]
    fn infers_the_driver() {
        assert_eq!(
            CgroupDriver::of_parent(&cgroupfs_parent()),
            CgroupDriver::Cgroupfs
        );
        assert_eq!(
            CgroupDriver::of_parent(&systemd_parent()),
            CgroupDriver::Systemd
        );
        assert_eq!(
            CgroupDriver::of_parent("/kubepods.slice/kubepods-besteffort.slice/"),
            CgroupDriver::Systemd
        );
        assert_eq!(
            CgroupDriver::of_cgroups_path(&container_path(CgroupDriver::Systemd, APP_ID)),
            CgroupDriver::Systemd
        );
        assert_eq!(
            CgroupDriver::of_cgroups_path(&container_path(CgroupDriver::Cgroupfs, APP_ID)),
            CgroupDriver::Cgroupfs
        );
    }

    /// kubelet's own example (cgroup_manager_linux.go, `ToSystemd`): {"kubepods", "burstable",
    /// "pod1234-abcd-5678-efgh"} is
    /// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice.
    #[test]
    fn expands_slices_like_systemd() {
        assert_eq!(
            expand_slice("kubepods-burstable-pod1234_abcd_5678_efgh.slice").expect("valid"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
        assert_eq!(
            expand_slice("kubepods.slice").expect("valid"),
            "/kubepods.slice"
        );
        assert_eq!(expand_slice("-.slice").expect("root"), "/");
        for bad in [
            "kubepods",
            ".slice",
            "a--b.slice",
            "-a.slice",
            "a-.slice",
            "a/b.slice",
        ] {
            assert!(expand_slice(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn pod_and_container_paths() {
        let pod = PathBuf::from(format!("kubepods/burstable/pod{POD_UID}"));
        assert_eq!(pod_cgroup_dir(&cgroupfs_parent()).expect("cgroupfs"), pod);
        let slice = format!(
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            POD_UID.replace('-', "_")
        );
        assert_eq!(
            pod_cgroup_dir(&systemd_parent()).expect("systemd"),
            PathBuf::from(&slice)
        );
        // The expanded form (what kubelet's ToSystemd returns) names the same cgroup.
        assert_eq!(
            pod_cgroup_dir(&format!("/{slice}")).expect("expanded"),
            PathBuf::from(&slice)
        );
        assert_eq!(
            container_cgroup_dir(&container_path(CgroupDriver::Cgroupfs, APP_ID))
                .expect("cgroupfs"),
            pod.join(APP_ID)
        );
        assert_eq!(
            container_cgroup_dir(&container_path(CgroupDriver::Systemd, APP_ID)).expect("systemd"),
            PathBuf::from(&slice).join(format!("cri-containerd-{APP_ID}.scope"))
        );
        for bad in [
            "/kubepods/../../etc",
            "/",
            "",
            "/kubepods/./x",
            "/kube\0pods",
        ] {
            assert!(
                matches!(pod_cgroup_dir(bad), Err(CgroupError::InvalidPath { .. })),
                "{bad:?} should be refused"
            );
        }
        for bad in [
            "a.slice:cri-containerd",
            "a.slice:cri-containerd:id:x",
            "a.slice::id",
            "a.slice:p:../x",
            "nope:p:id",
        ] {
            assert!(
                matches!(
                    container_cgroup_dir(bad),
                    Err(CgroupError::InvalidPath { .. })
                ),
                "{bad:?} should be refused"
            );
        }
    }

    /// The fixtures hold a Burstable pod as kubelet and runc set it up: containers "app"
    /// (requests 100m / 100Mi, limits 200m / 200Mi) and "sidecar" (request 50m, no limits).
    /// Pod: shares MilliCPUToShares(150m) = 153, no quota, no memory limit (not every container
    /// has limits). app: 102 shares, quota 20000. sidecar: 51 shares.
    /// On v2 the files hold runc's weights: 153 → 6, 102 → 4, 51 → 2, read back as kubelet
    /// does: 6 → 133, and (kubelet's TestCPUSharesEqualAfterV2RoundTrip) 4 → 80, 2 → 28.
    #[test]
    fn reads_pod_and_container_values() {
        for (name, version, driver) in FIXTURES {
            let cgroups = Cgroups::with_version(fixture(name), version);
            let (pod_shares, app_shares, sidecar_shares) = match version {
                CgroupVersion::V1 => (153, 102, 51),
                CgroupVersion::V2 => (133, 80, 28),
            };
            let weight = |w| (version == CgroupVersion::V2).then_some(w);
            assert_eq!(
                cgroups.read_pod(&parent(driver)).expect("pod"),
                CgroupValues {
                    cpu_shares: Some(pod_shares),
                    cpu_weight: weight(6),
                    cpu_quota: None,
                    cpu_period: Some(100_000),
                    memory_limit: None
                },
                "{name} pod"
            );
            assert_eq!(
                cgroups
                    .read_container(&container_path(driver, APP_ID))
                    .expect("app"),
                CgroupValues {
                    cpu_shares: Some(app_shares),
                    cpu_weight: weight(4),
                    cpu_quota: Some(20_000),
                    cpu_period: Some(100_000),
                    memory_limit: Some(200 * 1024 * 1024)
                },
                "{name} app"
            );
            assert_eq!(
                cgroups
                    .read_container(&container_path(driver, SIDECAR_ID))
                    .expect("sidecar"),
                CgroupValues {
                    cpu_shares: Some(sidecar_shares),
                    cpu_weight: weight(2),
                    cpu_quota: None,
                    cpu_period: Some(100_000),
                    memory_limit: None
                },
                "{name} sidecar"
            );
            assert_eq!(
                cgroups
                    .pod_memory_usage(&parent(driver))
                    .expect("pod usage"),
                48_562_176,
                "{name}"
            );
            assert_eq!(
                cgroups
                    .container_memory_usage(&container_path(driver, APP_ID))
                    .expect("app usage"),
                41_271_296,
                "{name}"
            );
        }
    }

    #[test]
    fn writes_land_in_the_right_files_and_read_back() {
        for (name, version, driver) in FIXTURES {
            let copy = copy_of(name);
            let cgroups = Cgroups::with_version(copy.path(), version);
            let parent = parent(driver);
            cgroups
                .write_pod_cpu(&parent, PodCpu::Shares(512))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            cgroups
                .write_pod_cpu(&parent, quota(Some(50_000)))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let applied = cgroups
                .write_pod_memory(&parent, Some(256 * 1024 * 1024))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(applied, Some(256 * 1024 * 1024), "{name}");
            let dir = |controller: &str| match version {
                CgroupVersion::V1 => {
                    // v1-cgroupfs keeps cpu in the combined "cpu,cpuacct" hierarchy.
                    let hierarchy = if controller == "cpu" && name == "v1-cgroupfs" {
                        "cpu,cpuacct"
                    } else {
                        controller
                    };
                    copy.path()
                        .join(hierarchy)
                        .join(pod_cgroup_dir(&parent).expect("path"))
                }
                CgroupVersion::V2 => copy.path().join(pod_cgroup_dir(&parent).expect("path")),
            };
            let file = |controller: &str, file: &str| {
                fs::read_to_string(dir(controller).join(file)).expect("written file")
            };
            match version {
                CgroupVersion::V1 => {
                    assert_eq!(file("cpu", "cpu.shares"), "512", "{name}");
                    assert_eq!(file("cpu", "cpu.cfs_quota_us"), "50000", "{name}");
                    assert_eq!(
                        file("memory", "memory.limit_in_bytes"),
                        "268435456",
                        "{name}"
                    );
                }
                CgroupVersion::V2 => {
                    // runc: 1 + (512 - 2) * 9999 / 262142 = 1 + 19 = 20.
                    assert_eq!(file("cpu", "cpu.weight"), "20", "{name}");
                    assert_eq!(file("cpu", "cpu.max"), "50000 100000", "{name}");
                    assert_eq!(file("memory", "memory.max"), "268435456", "{name}");
                }
            }
            // Back to unlimited.
            cgroups
                .write_pod_cpu(&parent, quota(None))
                .expect("unlimited cpu");
            assert_eq!(
                cgroups
                    .write_pod_memory(&parent, None)
                    .expect("unlimited memory"),
                None
            );
            let read = cgroups.read_pod(&parent).expect("read back");
            assert_eq!((read.cpu_quota, read.memory_limit), (None, None), "{name}");
            match version {
                CgroupVersion::V1 => {
                    assert_eq!(file("cpu", "cpu.cfs_quota_us"), "-1");
                    assert_eq!(file("memory", "memory.limit_in_bytes"), "-1");
                }
                CgroupVersion::V2 => {
                    assert_eq!(file("cpu", "cpu.max"), "max 100000");
                    assert_eq!(file("memory", "memory.max"), "max");
                }
            }
            // A weight read is put back as it was (on v1, as the shares kubelet reads it as).
            cgroups
                .write_pod_cpu(&parent, PodCpu::Weight(39))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let read = cgroups.read_pod(&parent).expect("read back");
            match version {
                CgroupVersion::V1 => {
                    assert_eq!(file("cpu", "cpu.shares"), "998");
                    assert_eq!((read.cpu_shares, read.cpu_weight), (Some(998), None));
                }
                CgroupVersion::V2 => {
                    assert_eq!(file("cpu", "cpu.weight"), "39");
                    assert_eq!((read.cpu_shares, read.cpu_weight), (Some(998), Some(39)));
                    assert_eq!(read.shares_setting(), Some(PodCpu::Weight(39)));
                }
            }
        }
    }

    /// Odd contents are errors naming the file, never panics or guesses.
    #[test]
    fn odd_contents_are_errors() {
        let cases: [(&str, CgroupVersion, &str, &str); 10] = [
            ("v1-systemd", CgroupVersion::V1, "cpu/cpu.shares", "max\n"),
            ("v1-systemd", CgroupVersion::V1, "cpu/cpu.shares", ""),
            (
                "v1-systemd",
                CgroupVersion::V1,
                "cpu/cpu.cfs_quota_us",
                "-5\n",
            ),
            (
                "v1-systemd",
                CgroupVersion::V1,
                "cpu/cpu.cfs_period_us",
                "100000 100000\n",
            ),
            (
                "v1-systemd",
                CgroupVersion::V1,
                "memory/memory.limit_in_bytes",
                "lots\n",
            ),
            ("v2-systemd", CgroupVersion::V2, "cpu.weight", "0\n"),
            ("v2-systemd", CgroupVersion::V2, "cpu.weight", "10001\n"),
            ("v2-systemd", CgroupVersion::V2, "cpu.max", "max\n"),
            ("v2-systemd", CgroupVersion::V2, "cpu.max", "fifty 100000\n"),
            ("v2-systemd", CgroupVersion::V2, "memory.max", "-4096\n"),
        ];
        for (name, version, file, contents) in cases {
            let copy = copy_of(name);
            let rel = pod_cgroup_dir(&systemd_parent()).expect("path");
            let path = match file.split_once('/') {
                Some((controller, file)) => copy.path().join(controller).join(&rel).join(file),
                None => copy.path().join(&rel).join(file),
            };
            fs::write(&path, contents).expect("corrupt fixture copy");
            let cgroups = Cgroups::with_version(copy.path(), version);
            let err = cgroups
                .read_pod(&systemd_parent())
                .expect_err("odd contents");
            let message = err.to_string();
            assert!(
                message.contains(&path.display().to_string()),
                "{file} {contents:?}: {message}"
            );
            assert!(
                message.contains(&format!("holds {contents:?}")),
                "{file} {contents:?}: {message}"
            );
        }
        // A trailing newline (as the kernel writes) or none at all both read fine.
        let copy = copy_of("v1-cgroupfs");
        let shares = copy
            .path()
            .join("cpu,cpuacct")
            .join(pod_cgroup_dir(&cgroupfs_parent()).expect("path"))
            .join("cpu.shares");
        fs::write(&shares, "153").expect("no newline");
        let cgroups = Cgroups::with_version(copy.path(), CgroupVersion::V1);
        assert_eq!(
            cgroups
                .read_pod(&cgroupfs_parent())
                .expect("read")
                .cpu_shares,
            Some(153)
        );
        // A missing file names the file and the OS error.
        fs::remove_file(&shares).expect("remove");
        let err = cgroups.read_pod(&cgroupfs_parent()).expect_err("missing");
        let message = err.to_string();
        assert!(message.starts_with("cpu controller: reading "), "{message}");
        assert!(
            message.contains("cpu.shares: No such file or directory (os error 2)"),
            "{message}"
        );
        // A v1 root without the controller's hierarchy.
        let empty = tempfile::tempdir().expect("tempdir");
        let err = Cgroups::with_version(empty.path(), CgroupVersion::V1)
            .read_pod(&cgroupfs_parent())
            .expect_err("no hierarchy");
        assert!(
            matches!(
                err,
                CgroupError::NoController {
                    controller: "cpu",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn weight_conversions() {
        // kubelet's TestCPUSharesEqualAfterV2RoundTrip: 50m → 51 shares → weight 2 → 28 shares;
        // 100m → 102 → 4 → 80.
        assert_eq!(shares_to_weight(51), 2);
        assert_eq!(weight_to_shares(2), 28);
        assert_eq!(shares_to_weight(102), 4);
        assert_eq!(weight_to_shares(4), 80);
        // The kernel's bounds map onto each other.
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(weight_to_shares(1), 2);
        assert_eq!(weight_to_shares(10_000), 262_144);
        // Out-of-range shares are clamped rather than wrapped.
        assert_eq!(shares_to_weight(0), 1);
        assert_eq!(shares_to_weight(u64::MAX), 10_000);
    }

    #[test]
    fn memory_limits_round_down_to_pages() {
        let page = page_size() as i64;
        assert!(
            page >= 4096 && (page as u64).is_power_of_two(),
            "page size {page}"
        );
        assert_eq!(applied_memory_limit(100 * page), 100 * page);
        assert_eq!(applied_memory_limit(100 * page + 1), 100 * page);
        assert_eq!(applied_memory_limit(page - 1), 0);
    }

    /// Removes the throwaway cgroups (and kills what runs in them) even when the test fails.
    struct RealCgroup {
        dirs: Vec<PathBuf>,
        child: Option<std::process::Child>,
    }

    impl RealCgroup {
        /// The throwaway pod cgroup `/<base>/pod<POD_UID>` under the cpu and memory controllers
        /// of `root`, each directory removed again with the guard.
        fn make(root: &Path, base: &str) -> Self {
            let mut guard = RealCgroup {
                dirs: Vec::new(),
                child: None,
            };
            for controller in ["cpu", "memory"] {
                let top = root.join(controller).join(base);
                for dir in [top.clone(), top.join(format!("pod{POD_UID}"))] {
                    if let Err(e) = fs::create_dir(&dir) {
                        panic!(
                            "this test must run as root with writable v1 controllers: mkdir {}: {e}",
                            dir.display()
                        );
                    }
                    guard.dirs.push(dir);
                }
            }
            guard
        }

        /// A process charged to the cgroup whose `cgroup.procs` is `procs`, killed with the
        /// guard.
        fn charge_a_process(&mut self, procs: &Path) {
            let child = std::process::Command::new("sh")
                .arg("-c")
                .arg("echo $$ > \"$1\" && exec sleep 60")
                .arg("sh")
                .arg(procs)
                .spawn()
                .expect("spawn sh");
            self.child = Some(child);
        }
    }

    impl Drop for RealCgroup {
        fn drop(&mut self) {
            if let Some(child) = &mut self.child {
                let _ = child.kill();
                let _ = child.wait();
            }
            // Children before parents.
            for dir in self.dirs.iter().rev() {
                if let Err(e) = fs::remove_dir(dir) {
                    eprintln!("could not remove test cgroup {}: {e}", dir.display());
                }
            }
        }
    }

    /// This machine's real cgroup v1 hierarchy: writes, kernel rounding and clamping, EBUSY.
    /// Needs root on a cgroup v1 host: `tests/run-all.sh` runs it (CI is such a machine), where
    /// anything missing fails it saying why.
    #[test]
    #[ignore = "needs root and the test containerd: run tests/run-all.sh"]
    fn real_cgroup_v1() {
        let root = Path::new(DEFAULT_ROOT);
        let cgroups =
            Cgroups::detect(root).expect("this test needs the cgroup filesystem at /sys/fs/cgroup");
        assert_eq!(
            cgroups.version(),
            CgroupVersion::V1,
            "this test needs a cgroup v1 (or hybrid) host, as CI has"
        );
        let base = format!("inplaced-unit-test-{}", std::process::id());
        let parent = format!("/{base}/pod{POD_UID}");
        let mut guard = RealCgroup::make(root, &base);
        real_v1_cpu(&cgroups, &parent);
        real_v1_memory(&cgroups, &parent);
        let procs = root
            .join("memory")
            .join(&base)
            .join(format!("pod{POD_UID}"))
            .join("cgroup.procs");
        guard.charge_a_process(&procs);
        real_v1_memory_below_usage(&cgroups, &parent);
    }

    /// cpu: values land, unlimited quota reads as None, the kernel's clamping is reported.
    fn real_v1_cpu(cgroups: &Cgroups, parent: &str) {
        cgroups
            .write_pod_cpu(parent, PodCpu::Shares(1024))
            .expect("cpu write");
        cgroups
            .write_pod_cpu(parent, quota(Some(150_000)))
            .expect("cpu write");
        let read = cgroups.read_pod(parent).expect("read");
        assert_eq!(
            (read.cpu_shares, read.cpu_quota, read.cpu_period),
            (Some(1024), Some(150_000), Some(100_000))
        );
        cgroups
            .write_pod_cpu(parent, PodCpu::Shares(2))
            .expect("shares");
        cgroups
            .write_pod_cpu(parent, quota(None))
            .expect("unlimited");
        assert_eq!(cgroups.read_pod(parent).expect("read").cpu_quota, None);
        let clamped = cgroups
            .write_pod_cpu(parent, PodCpu::Shares(1))
            .expect_err("kernel clamps 1 to 2");
        assert!(
            matches!(&clamped, CgroupError::Cpu(CpuError::File(FileError::Mismatch { written, read, .. })) if written == "1" && read == "2"),
            "{clamped}"
        );
        let refused = cgroups
            .write_pod_cpu(parent, quota(Some(500)))
            .expect_err("below 1 ms");
        assert!(
            refused
                .to_string()
                .contains("Invalid argument (os error 22)"),
            "{refused}"
        );
    }

    /// memory: page rounding is accepted and returned, unlimited reads as None.
    fn real_v1_memory(cgroups: &Cgroups, parent: &str) {
        assert_eq!(
            cgroups
                .write_pod_memory(parent, Some(100_000_000))
                .expect("memory write"),
            Some(applied_memory_limit(100_000_000))
        );
        assert_eq!(
            cgroups.read_pod(parent).expect("read").memory_limit,
            Some(applied_memory_limit(100_000_000))
        );
        assert_eq!(
            cgroups.write_pod_memory(parent, None).expect("unlimited"),
            None
        );
        assert_eq!(cgroups.read_pod(parent).expect("read").memory_limit, None);
    }

    /// With a process charged to the pod cgroup, a limit below its usage is refused (EBUSY).
    fn real_v1_memory_below_usage(cgroups: &Cgroups, parent: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let usage = loop {
            let usage = cgroups.pod_memory_usage(parent).expect("usage");
            if usage > 0 || std::time::Instant::now() > deadline {
                break usage;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(usage > 0, "the child never showed up in the memory cgroup");
        let limit = 4096;
        let busy = cgroups
            .write_pod_memory(parent, Some(limit))
            .expect_err("below usage");
        assert!(
            matches!(&busy, CgroupError::Memory(MemoryError::LimitBelowUsage { limit: l, .. }) if *l == limit),
            "{busy}"
        );
        assert!(busy.to_string().contains("(EBUSY)"), "{busy}");
        // Well above the usage it is taken.
        let roomy = 64 * 1024 * 1024;
        assert_eq!(
            cgroups
                .write_pod_memory(parent, Some(roomy))
                .expect("roomy"),
            Some(roomy)
        );
    }
}
