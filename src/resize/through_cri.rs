//! The `cri` actuator: resizes running containers through the runtime and the pod cgroup in
//! kubelet's order (`docs/kubelet-resize.md`): memory first, then cpu; a pod cgroup
//! value that grows (memory limit, cpu quota, cpu shares: each on its own) is written before the
//! containers, one that shrinks after them; containers
//! that shrink go before those that grow; a memory limit is never set at or below what the
//! container (or the pod) uses now. Every step is read back.

use std::cmp::Ordering;

use crate::cri::proto::LinuxContainerResources;
use crate::cri::{CriClient, CriError};

use super::cgroup::{CgroupError, CgroupValues, Cgroups, PodCpu, applied_memory_limit};
use super::resources::{self, CriResources, InitContainer, PodCgroupConfig, QosClass};
use super::slice_unit::{self, SliceUnitError};
use crate::resources::Resources;

/// One container to resize: the runtime container and the resources it must end with.
#[derive(Clone, Debug)]
pub(crate) struct ContainerTarget {
    pub name: String,
    /// The runtime's container ID (no `containerd://` prefix).
    pub container_id: String,
    pub target: Resources,
    /// The node's kubelet's rule for an explicit zero cpu request.
    pub zero_cpu: resources::ZeroCpuRequest,
}

/// What a pod must look like after the resize.
#[derive(Clone, Debug)]
pub(crate) struct PodTarget {
    /// The containers to change.
    pub containers: Vec<ContainerTarget>,
    /// Every app container of the pod with the resources it will have (the resized ones with
    /// their targets): the pod cgroup is sized from all of them and the init containers.
    pub all: Vec<Resources>,
    pub init: Vec<InitContainer>,
    /// Over the app and the init containers.
    pub qos: QosClass,
}

/// A container as resized, read back from the runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub name: String,
    pub container_id: String,
    /// cpu request/limit and memory limit as the runtime reports them; the memory request is
    /// the target's (the runtime does not know memory requests).
    pub resources: Resources,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResizeError {
    #[error("container runtime: {0}")]
    Runtime(#[from] CriError),
    #[error("{0}")]
    Cgroup(#[from] CgroupError),
    #[error("pod slice: {0}")]
    SliceUnit(#[from] SliceUnitError),
    #[error("container {0} is not running")]
    NotRunning(String),
    #[error("the runtime does not report the cgroup of container {0}")]
    NoCgroupPath(String),
    #[error(
        "memory limit {limit} bytes for {what} is not above its current usage of {usage} bytes: lowering it would trigger the OOM killer"
    )]
    MemoryInUse {
        what: String,
        usage: u64,
        limit: i64,
    },
    #[error("{what}: asked for {expected}, but {source_name} shows {actual}")]
    Verify {
        what: String,
        expected: String,
        actual: String,
        source_name: &'static str,
    },
    /// Failed midway; the steps already taken were put back, so the pod is as it was.
    #[error("{0}; the changes already made were undone")]
    Undone(Box<ResizeError>),
    /// Failed midway, and putting back the steps already taken failed too.
    #[error(
        "{error}; undoing the changes already made failed ({undo}): the pod is left partly resized"
    )]
    PartlyApplied {
        error: Box<ResizeError>,
        undo: Box<ResizeError>,
    },
}

impl ResizeError {
    /// Worth trying again later (the runtime restarting, or the container restarting between
    /// the node view and the call: nothing was changed yet), as opposed to a refusal.
    pub fn is_transient(&self) -> bool {
        match self {
            ResizeError::Runtime(err) => err.is_transient(),
            ResizeError::SliceUnit(err) => err.is_transient(),
            ResizeError::NotRunning(_) => true,
            ResizeError::Undone(error) | ResizeError::PartlyApplied { error, .. } => {
                error.is_transient()
            }
            _ => false,
        }
    }

    /// Not a refusal: a failed call, a cgroup file or a read-back that a container stopping
    /// at that very moment can explain. One more attempt from a fresh view tells.
    pub(crate) fn may_be_a_race(&self) -> bool {
        match self {
            ResizeError::MemoryInUse { .. } => false,
            ResizeError::Undone(error) | ResizeError::PartlyApplied { error, .. } => {
                error.may_be_a_race()
            }
            _ => true,
        }
    }
}

/// A change made to the pod, with what puts it back.
enum Undo {
    PodMemory(Option<i64>),
    PodCpu(PodCpu),
    Container {
        index: usize,
        before: LinuxContainerResources,
    },
}

/// A container as found before changing it.
struct Current {
    target: ContainerTarget,
    cgroups_path: String,
    linux: LinuxContainerResources,
    wanted: CriResources,
}

pub async fn apply(
    cri: &CriClient,
    cgroups: &Cgroups,
    pod: &PodTarget,
) -> Result<Vec<Applied>, ResizeError> {
    let result = apply_once(cri, cgroups, pod).await;
    let Err(err) = &result else { return result };
    if !err.may_be_a_race() {
        return result;
    }
    // A container stopped under the resize (its cgroup gone, the runtime refusing a stopped
    // container, a read-back of another instance): that is a restart to wait out, and the
    // resize is applied to the new instance, not a failure of the request. The runtime may
    // report the container running for a moment after its cgroup is gone (the exit not yet
    // processed), so it is asked a few times before the failure stands.
    for attempt in 0..STOPPING_CHECKS {
        if attempt > 0 {
            tokio::time::sleep(STOPPING_CHECK_INTERVAL).await;
        }
        for target in &pod.containers {
            match inspect(cri, target).await {
                Err(ResizeError::NotRunning(name)) => return Err(ResizeError::NotRunning(name)),
                Err(ResizeError::Runtime(err)) if err.is_not_found() => {
                    return Err(ResizeError::NotRunning(target.name.clone()));
                }
                _ => {}
            }
        }
    }
    result
}

/// How often, and how far apart, a failed resize asks whether a container was stopping.
const STOPPING_CHECKS: u32 = 5;
const STOPPING_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(300);

async fn apply_once(
    cri: &CriClient,
    cgroups: &Cgroups,
    pod: &PodTarget,
) -> Result<Vec<Applied>, ResizeError> {
    let mut current = Vec::new();
    for target in &pod.containers {
        current.push(inspect(cri, target).await?);
    }
    let Some(parent) = current
        .first()
        .map(|c| pod_cgroup_parent(&c.cgroups_path).to_owned())
    else {
        return Ok(Vec::new());
    };
    let pod_now = cgroups.read_pod(&parent)?;
    let pod_new = resources::pod_cgroup_config(&pod.all, &pod.init, pod.qos);

    // Every memory limit that goes down is checked against the usage before anything changes,
    // so a refusal leaves the pod as it was.
    for c in &current {
        let wanted = c.wanted.memory_limit_in_bytes;
        if wanted < c.linux.memory_limit_in_bytes
            || (wanted > 0 && c.linux.memory_limit_in_bytes == 0)
        {
            let usage = cgroups.container_memory_usage(&c.cgroups_path)?;
            check_usage(&c.target.name, usage, wanted)?;
        }
    }
    if !grows(pod_now.memory_limit, pod_new.memory_limit)
        && let Some(limit) = pod_new.memory_limit
    {
        check_usage("the pod", cgroups.pod_memory_usage(&parent)?, limit)?;
    }

    // A step that fails leaves the pod as it was: the steps before it are put back in reverse
    // order, which passes through the same states as going forward (kubelet instead retries
    // towards the spec, which a request that has failed no longer stands for).
    let mut undo = Vec::new();
    let result = match change(
        cri,
        cgroups,
        &parent,
        &pod_now,
        &pod_new,
        &mut current,
        &mut undo,
    )
    .await
    {
        Ok(()) => verify(cri, cgroups, &parent, &pod_new, &current)
            .await
            .map_err(|err| (err, false)),
        Err(err) => Err((err, true)),
    };
    match result {
        Ok(applied) => Ok(applied),
        Err((err, newest_failed)) => {
            Err(roll_back(cri, cgroups, &parent, &current, undo, err, newest_failed).await)
        }
    }
}

/// The writes, memory then cpu, each recorded in `undo` once made.
async fn change(
    cri: &CriClient,
    cgroups: &Cgroups,
    parent: &str,
    pod_now: &CgroupValues,
    pod_new: &PodCgroupConfig,
    current: &mut [Current],
    undo: &mut Vec<Undo>,
) -> Result<(), ResizeError> {
    // Memory.
    let memory_grows = grows(pod_now.memory_limit, pod_new.memory_limit);
    let write_memory = async |undo: &mut Vec<Undo>| -> Result<(), ResizeError> {
        if pod_now.memory_limit != pod_new.memory_limit {
            // Recorded first: a write that fails may still have changed something.
            undo.push(Undo::PodMemory(pod_now.memory_limit));
            write_pod_memory(cgroups, parent, pod_new.memory_limit).await?;
        }
        Ok(())
    };
    if memory_grows {
        write_memory(undo).await?;
    }
    let mut order: Vec<usize> = (0..current.len()).collect();
    // Decreases first, so that the pod never holds more than it had or will have.
    order.sort_by_key(|&i| {
        current[i].wanted.memory_limit_in_bytes - current[i].linux.memory_limit_in_bytes
    });
    for &i in &order {
        let c = &mut current[i];
        if c.wanted.memory_limit_in_bytes == c.linux.memory_limit_in_bytes {
            continue;
        }
        let before = c.linux.clone();
        // Without swap (kubelet's NoSwap) the memory+swap limit equals the memory limit, and
        // cgroup v1 refuses a memory limit above it: move both.
        let old = c.linux.memory_limit_in_bytes;
        if c.linux.memory_swap_limit_in_bytes == old || c.linux.memory_swap_limit_in_bytes == 0 {
            c.linux.memory_swap_limit_in_bytes = c.wanted.memory_limit_in_bytes;
        }
        c.linux.memory_limit_in_bytes = c.wanted.memory_limit_in_bytes;
        undo.push(Undo::Container { index: i, before });
        cri.update_container_resources(&c.target.container_id, c.linux.clone())
            .await?;
    }
    if !memory_grows {
        write_memory(undo).await?;
    }

    // CPU: the quota is hierarchical (a child may not exceed its parent), shares are not.
    let (cpu_before, cpu_after) = pod_cpu_writes(pod_now, pod_new);
    let write_cpu = async |undo: &mut Vec<Undo>, writes: &[(PodCpu, Option<PodCpu>)]| {
        for &(setting, previous) in writes {
            // Recorded first: a write that fails may still have changed something. A value
            // the kernel did not show cannot be put back; the read would have failed.
            if let Some(previous) = previous {
                undo.push(Undo::PodCpu(previous));
            }
            write_pod_cpu(cgroups, parent, setting).await?;
        }
        Ok::<(), ResizeError>(())
    };
    write_cpu(undo, &cpu_before).await?;
    order.sort_by_key(|&i| current[i].wanted.cpu_quota - current[i].linux.cpu_quota);
    for &i in &order {
        let c = &mut current[i];
        let wanted = &c.wanted;
        if (wanted.cpu_shares, wanted.cpu_quota, wanted.cpu_period)
            == (c.linux.cpu_shares, c.linux.cpu_quota, c.linux.cpu_period)
        {
            continue;
        }
        let before = c.linux.clone();
        c.linux.cpu_shares = wanted.cpu_shares;
        c.linux.cpu_quota = wanted.cpu_quota;
        c.linux.cpu_period = wanted.cpu_period;
        undo.push(Undo::Container { index: i, before });
        cri.update_container_resources(&c.target.container_id, c.linux.clone())
            .await?;
    }
    write_cpu(undo, &cpu_after).await?;
    Ok(())
}

/// Sets one cpu setting of the pod cgroup: under the systemd driver the slice's unit properties
/// first (`slice_unit`: systemd would otherwise put the old value back), then the file.
async fn write_pod_cpu(
    cgroups: &Cgroups,
    parent: &str,
    setting: PodCpu,
) -> Result<(), ResizeError> {
    if let Some(unit) = slice_unit::unit_of_parent(parent) {
        slice_unit::set(
            unit,
            &slice_unit::cpu_properties(cgroups.version(), setting),
        )
        .await?;
    }
    Ok(cgroups.write_pod_cpu(parent, setting)?)
}

/// Sets the pod cgroup's memory limit, the slice's unit property first (see [`write_pod_cpu`]);
/// returns the limit the kernel applied.
async fn write_pod_memory(
    cgroups: &Cgroups,
    parent: &str,
    limit: Option<i64>,
) -> Result<Option<i64>, ResizeError> {
    if let Some(unit) = slice_unit::unit_of_parent(parent) {
        slice_unit::set(
            unit,
            &slice_unit::memory_properties(cgroups.version(), limit),
        )
        .await?;
    }
    Ok(cgroups.write_pod_memory(parent, limit)?)
}

/// The pod cgroup's cpu writes before the containers' and after them, each with the setting
/// that puts it back. As kubelet does, each setting is written before the containers when it
/// grows and after them when it shrinks: the shares by the pod's requests, the quota by its
/// limits (the quota must be, a container's may not exceed its pod's). Unchanged settings are
/// not written.
type PodCpuWrites = Vec<(PodCpu, Option<PodCpu>)>;
fn pod_cpu_writes(now: &CgroupValues, new: &PodCgroupConfig) -> (PodCpuWrites, PodCpuWrites) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let write = (PodCpu::Shares(new.cpu_shares), now.shares_setting());
    match now.compare_shares(new.cpu_shares) {
        Some(Ordering::Equal) => {}
        Some(Ordering::Less) => after.push(write),
        Some(Ordering::Greater) | None => before.push(write),
    }
    if (now.cpu_quota, now.cpu_period) != (new.cpu_quota, Some(new.cpu_period)) {
        let write = (
            PodCpu::Quota {
                quota: new.cpu_quota,
                period: new.cpu_period,
            },
            now.cpu_period.map(|period| PodCpu::Quota {
                quota: now.cpu_quota,
                period,
            }),
        );
        if grows(now.cpu_quota, new.cpu_quota) {
            before.push(write);
        } else {
            after.push(write);
        }
    }
    (before, after)
}

async fn verify(
    cri: &CriClient,
    cgroups: &Cgroups,
    parent: &str,
    pod_new: &PodCgroupConfig,
    current: &[Current],
) -> Result<Vec<Applied>, ResizeError> {
    verify_pod(&cgroups.read_pod(parent)?, pod_new)?;
    let mut applied = Vec::new();
    for c in current {
        applied.push(verify_container(cri, cgroups, c).await?);
    }
    Ok(applied)
}

/// Puts back the steps taken, newest first; stops at the first that fails (the ones before it
/// would break the order that makes each write valid). `newest_failed`: the newest step is the
/// one whose write failed; it is put back in case it half happened, and if that fails too (most
/// likely it changed nothing) the others are still put back.
async fn roll_back(
    cri: &CriClient,
    cgroups: &Cgroups,
    parent: &str,
    current: &[Current],
    undo: Vec<Undo>,
    error: ResizeError,
    newest_failed: bool,
) -> ResizeError {
    if undo.is_empty() {
        return error;
    }
    for (newest_first, step) in undo.into_iter().rev().enumerate() {
        let result = match step {
            Undo::PodMemory(limit) => {
                // Lowered back only above what the pod uses now, as going forward: the memory
                // it grew into since is not taken away by the OOM killer.
                let safe = match limit {
                    Some(limit) => cgroups
                        .pod_memory_usage(parent)
                        .map_err(ResizeError::from)
                        .and_then(|usage| check_usage("the pod", usage, limit)),
                    None => Ok(()),
                };
                match safe {
                    Ok(()) => write_pod_memory(cgroups, parent, limit).await.map(drop),
                    Err(e) => Err(e),
                }
            }
            Undo::PodCpu(setting) => write_pod_cpu(cgroups, parent, setting).await,
            Undo::Container { index, before } => match current.get(index) {
                Some(c) => {
                    let lowered = before.memory_limit_in_bytes > 0
                        && (c.linux.memory_limit_in_bytes == 0
                            || before.memory_limit_in_bytes < c.linux.memory_limit_in_bytes);
                    let safe = if lowered {
                        cgroups
                            .container_memory_usage(&c.cgroups_path)
                            .map_err(ResizeError::from)
                            .and_then(|usage| {
                                check_usage(&c.target.name, usage, before.memory_limit_in_bytes)
                            })
                    } else {
                        Ok(())
                    };
                    match safe {
                        Ok(()) => cri
                            .update_container_resources(&c.target.container_id, before)
                            .await
                            .map_err(ResizeError::from),
                        Err(err) => Err(err),
                    }
                }
                None => Ok(()),
            },
        };
        if let Err(undo) = result {
            if newest_first == 0 && newest_failed {
                tracing::debug!(error = %undo, "the failed step could not be put back; it most likely changed nothing");
                continue;
            }
            return ResizeError::PartlyApplied {
                error: Box::new(error),
                undo: Box::new(undo),
            };
        }
    }
    ResizeError::Undone(Box::new(error))
}

async fn inspect(cri: &CriClient, target: &ContainerTarget) -> Result<Current, ResizeError> {
    let response = cri.container_status(&target.container_id, true).await?;
    let status = response
        .status
        .as_ref()
        .ok_or_else(|| ResizeError::NotRunning(target.name.clone()))?;
    if status.state != crate::cri::proto::ContainerState::ContainerRunning as i32 {
        return Err(ResizeError::NotRunning(target.name.clone()));
    }
    let cgroups_path = response
        .info
        .get("info")
        .and_then(|info| cgroups_path_of(info))
        .ok_or_else(|| ResizeError::NoCgroupPath(target.name.clone()))?;
    let linux = status
        .resources
        .as_ref()
        .and_then(|r| r.linux.clone())
        .unwrap_or_default();
    Ok(Current {
        wanted: resources::cri_resources(&target.target, target.zero_cpu),
        target: target.clone(),
        cgroups_path,
        linux,
    })
}

/// `runtimeSpec.linux.cgroupsPath` from containerd's verbose container info.
fn cgroups_path_of(info: &str) -> Option<String> {
    let info: serde_json::Value = serde_json::from_str(info).ok()?;
    let path = info
        .pointer("/runtimeSpec/linux/cgroupsPath")?
        .as_str()?
        .to_owned();
    (!path.is_empty()).then_some(path)
}

/// The pod cgroup of a container cgroup: the parent directory with the cgroupfs driver
/// (`/kubepods/burstable/pod<uid>/<id>`), the slice with the systemd driver
/// (`kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`).
pub fn pod_cgroup_parent(cgroups_path: &str) -> &str {
    match cgroups_path.split_once(':') {
        Some((slice, _)) => slice,
        None => cgroups_path
            .rsplit_once('/')
            .map_or(cgroups_path, |(parent, _)| parent),
    }
}

/// Whether going from `now` to `new` raises the limit (None is unlimited).
fn grows(now: Option<i64>, new: Option<i64>) -> bool {
    match (now, new) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(now), Some(new)) => new >= now,
    }
}

fn check_usage(what: &str, usage: u64, limit: i64) -> Result<(), ResizeError> {
    if i64::try_from(usage).map_or(true, |usage| usage >= limit) {
        return Err(ResizeError::MemoryInUse {
            what: what.to_owned(),
            usage,
            limit,
        });
    }
    Ok(())
}

fn mismatch(
    what: &str,
    expected: impl std::fmt::Debug,
    actual: impl std::fmt::Debug,
    source_name: &'static str,
) -> ResizeError {
    ResizeError::Verify {
        what: what.to_owned(),
        expected: format!("{expected:?}"),
        actual: format!("{actual:?}"),
        source_name,
    }
}

/// The kernel keeps memory limits in whole pages: a limit reads back rounded down.
fn verify_pod(read: &CgroupValues, wanted: &PodCgroupConfig) -> Result<(), ResizeError> {
    let memory_limit = wanted.memory_limit.map(applied_memory_limit);
    if read.memory_limit != memory_limit {
        return Err(mismatch(
            "pod memory limit",
            memory_limit,
            read.memory_limit,
            "the pod cgroup",
        ));
    }
    if read.cpu_quota != wanted.cpu_quota {
        return Err(mismatch(
            "pod cpu quota",
            wanted.cpu_quota,
            read.cpu_quota,
            "the pod cgroup",
        ));
    }
    Ok(())
}

async fn verify_container(
    cri: &CriClient,
    cgroups: &Cgroups,
    c: &Current,
) -> Result<Applied, ResizeError> {
    let name = &c.target.name;
    let response = cri.container_status(&c.target.container_id, false).await?;
    let linux = response
        .status
        .and_then(|s| s.resources)
        .and_then(|r| r.linux)
        .unwrap_or_default();
    let reported = CriResources {
        cpu_shares: linux.cpu_shares,
        cpu_quota: linux.cpu_quota,
        cpu_period: linux.cpu_period,
        memory_limit_in_bytes: linux.memory_limit_in_bytes,
    };
    if reported != c.wanted {
        return Err(mismatch(
            name,
            c.wanted,
            reported,
            "ContainerStatus.resources",
        ));
    }
    let files = cgroups.read_container(&c.cgroups_path)?;
    // Read back in whole pages, as the pod's (see `verify_pod`).
    let limit = (c.wanted.memory_limit_in_bytes > 0)
        .then(|| applied_memory_limit(c.wanted.memory_limit_in_bytes));
    if limit.is_some() && files.memory_limit != limit {
        return Err(mismatch(
            name,
            limit,
            files.memory_limit,
            "the container's memory cgroup",
        ));
    }
    let quota = (c.wanted.cpu_quota > 0).then_some(c.wanted.cpu_quota);
    if quota.is_some() && files.cpu_quota != quota {
        return Err(mismatch(
            name,
            quota,
            files.cpu_quota,
            "the container's cpu cgroup",
        ));
    }
    let mut resources = resources::from_cri(&reported);
    resources.memory_request = c.target.target.memory_request;
    Ok(Applied {
        name: name.clone(),
        container_id: c.target.container_id.clone(),
        resources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel keeps a memory limit in whole pages, so what reads back is the limit rounded
    /// down: 100 MB (not a page multiple) reads back as 24,414 pages of 4 KiB.
    #[test]
    fn a_memory_limit_read_back_in_whole_pages_is_the_one_written() {
        let wanted = PodCgroupConfig {
            cpu_shares: 1024,
            cpu_quota: Some(100_000),
            cpu_period: 100_000,
            memory_limit: Some(100_000_000),
        };
        let read = CgroupValues {
            cpu_shares: Some(1024),
            cpu_weight: None,
            cpu_quota: Some(100_000),
            cpu_period: Some(100_000),
            memory_limit: Some(applied_memory_limit(100_000_000)),
        };
        verify_pod(&read, &wanted).expect("the kernel's rounding is no mismatch");
        let other = CgroupValues {
            memory_limit: Some(applied_memory_limit(200_000_000)),
            ..read
        };
        assert!(verify_pod(&other, &wanted).is_err());
    }

    #[test]
    fn a_container_restarting_meanwhile_is_tried_again_not_failed() {
        assert!(ResizeError::NotRunning("side".into()).is_transient());
        assert!(!ResizeError::NoCgroupPath("side".into()).is_transient());
    }

    #[test]
    fn pod_cgroup_of_a_container_cgroup() {
        assert_eq!(
            pod_cgroup_parent("/kubepods/burstable/pod123/abcdef"),
            "/kubepods/burstable/pod123"
        );
        assert_eq!(
            pod_cgroup_parent("kubepods-burstable-pod1_2.slice:cri-containerd:abcdef"),
            "kubepods-burstable-pod1_2.slice"
        );
    }

    #[test]
    fn growth_treats_none_as_unlimited() {
        assert!(grows(Some(100), None));
        assert!(grows(None, None));
        assert!(!grows(None, Some(100)));
        assert!(grows(Some(100), Some(200)));
        assert!(!grows(Some(200), Some(100)));
    }

    /// kubelet's order: each of the pod's cpu settings before the containers when it grows,
    /// after them when it shrinks, whatever the other one does.
    #[test]
    fn pod_cpu_settings_are_written_each_in_its_own_direction() {
        let now = CgroupValues {
            cpu_shares: Some(1024),
            cpu_weight: None,
            cpu_quota: Some(100_000),
            cpu_period: Some(100_000),
            memory_limit: None,
        };
        let pod = |cpu_shares, cpu_quota| PodCgroupConfig {
            cpu_shares,
            cpu_quota,
            cpu_period: 100_000,
            memory_limit: None,
        };
        let quota = |quota| PodCpu::Quota {
            quota,
            period: 100_000,
        };
        let was_shares = Some(PodCpu::Shares(1024));
        let was_quota = Some(quota(Some(100_000)));
        // Requests up, limits down.
        assert_eq!(
            pod_cpu_writes(&now, &pod(2048, Some(50_000))),
            (
                vec![(PodCpu::Shares(2048), was_shares)],
                vec![(quota(Some(50_000)), was_quota)]
            )
        );
        // Requests down, limits up (unlimited counts as up).
        assert_eq!(
            pod_cpu_writes(&now, &pod(512, None)),
            (
                vec![(quota(None), was_quota)],
                vec![(PodCpu::Shares(512), was_shares)]
            )
        );
        // Both up; nothing changed.
        assert_eq!(
            pod_cpu_writes(&now, &pod(2048, Some(200_000))),
            (
                vec![
                    (PodCpu::Shares(2048), was_shares),
                    (quota(Some(200_000)), was_quota)
                ],
                vec![]
            )
        );
        assert_eq!(
            pod_cpu_writes(&now, &pod(1024, Some(100_000))),
            (vec![], vec![])
        );

        // cgroup v2: the shares are compared and put back as the weight the file holds. Weight
        // 39 reads as 998 shares (kubelet's formula); 1024 shares are weight 39 again (runc's),
        // so they are no change, and the undo writes 39, not the weight of 998 shares (38).
        let v2 = CgroupValues {
            cpu_shares: Some(998),
            cpu_weight: Some(39),
            ..now
        };
        assert_eq!(
            pod_cpu_writes(&v2, &pod(1024, Some(100_000))),
            (vec![], vec![])
        );
        assert_eq!(
            pod_cpu_writes(&v2, &pod(2048, Some(100_000))),
            (
                vec![(PodCpu::Shares(2048), Some(PodCpu::Weight(39)))],
                vec![]
            )
        );
        assert_eq!(
            pod_cpu_writes(&v2, &pod(512, Some(100_000))),
            (
                vec![],
                vec![(PodCpu::Shares(512), Some(PodCpu::Weight(39)))]
            )
        );
    }

    #[test]
    fn usage_must_stay_below_the_new_limit() {
        assert!(check_usage("c", 99, 100).is_ok());
        let err = check_usage("c", 100, 100).expect_err("at the limit");
        assert!(
            err.to_string()
                .contains("not above its current usage of 100 bytes")
        );
        assert!(check_usage("c", u64::MAX, 100).is_err());
    }

    #[test]
    fn cgroups_path_from_verbose_info() {
        let info = r#"{"pid":1,"runtimeSpec":{"linux":{"cgroupsPath":"/kubepods/pod1/c1"}}}"#;
        assert_eq!(cgroups_path_of(info).as_deref(), Some("/kubepods/pod1/c1"));
        assert_eq!(cgroups_path_of(r#"{"runtimeSpec":{}}"#), None);
        assert_eq!(cgroups_path_of("not json"), None);
    }
}
