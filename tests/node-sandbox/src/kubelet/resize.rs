//! In-place pod resize as the kubelet of the configured release does it (KEP 1287,
//! `docs/kubelet-resize.md`): the allocation checkpoint, the feasibility decision,
//! actuation in kubelet's order (memory, then cpu; the pod cgroup grows before and shrinks after
//! the containers; container decreases before increases), and what the pod status reports.
//!
//! Simplified: only regular containers are resized (sidecars and init containers keep their
//! admitted resources, and the pod cgroup counts them as at creation); feasibility counts the
//! sum of the regular containers' requests (no overhead, no init-container maximum, no pod
//! count); a resize restarts nothing, whatever `resizePolicy` says; no resize events.

use std::collections::{BTreeMap, HashMap};

use inplaced::cri::proto::{Container, ContainerState, ContainerStatus, LinuxContainerResources};
use serde_json::{Value, json};

use super::spec::{self, str_field};
use super::{Sandbox, Shared, cgroups, lock};

/// How the impersonated release resizes and reports, from its minor version and the value of
/// the InPlacePodVerticalScaling gate (off by default in 1.27–1.32, on from 1.33).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeRelease {
    minor: u32,
    gate: bool,
}

impl ResizeRelease {
    pub fn new(minor: u32, gate: bool) -> Self {
        ResizeRelease { minor, gate }
    }

    /// The kubelet resizes in place: 1.27+ with the gate.
    pub fn active(self) -> bool {
        self.gate && self.minor >= 27
    }

    /// 1.33+: `PodResizePending`/`PodResizeInProgress` conditions; before, `status.resize`.
    pub fn conditions(self) -> bool {
        self.minor >= 33
    }

    /// `containerStatuses[].allocatedResources`: 1.27–1.31 and 1.33+ (1.32 reports it only with
    /// the InPlacePodVerticalScalingAllocatedStatus alpha gate, off by default).
    pub fn reports_allocated(self) -> bool {
        self.minor != 32
    }

    /// `containerStatuses[].resources` of a container that is not running (its allocated
    /// resources): 1.32+; before, running containers only.
    pub fn resources_when_not_running(self) -> bool {
        self.minor >= 32
    }

    /// 1.33+ compares the allocation with what it last sent the runtime, so a change made behind
    /// its back stays until the next resize of the pod; before, with what the runtime reports,
    /// so such a change is undone at the next sync.
    pub fn edge_triggered(self) -> bool {
        self.minor >= 33
    }

    /// Before lowering a container's memory limit, 1.34+ checks the container's own usage;
    /// earlier releases check the pod's only (KEP 1287, "Memory Limit Decreases", version skew
    /// note).
    pub fn checks_container_memory_usage(self) -> bool {
        self.minor >= 34
    }
}

/// kubelet's allocation checkpoint for one pod: container name → the `resources` admitted
/// (`Null` for a container without any).
pub type Allocation = BTreeMap<String, Value>;

/// The allocation that admits the pod's spec as it is.
pub fn allocation_of(pod: &Value) -> Allocation {
    spec::containers(pod, "containers")
        .iter()
        .map(|c| {
            let resources = c.get("resources").cloned().unwrap_or(Value::Null);
            (str_field(c, "name").to_owned(), resources)
        })
        .collect()
}

/// The cpu/memory part of v1 resources, in milli-cpu and bytes, for comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuMemory([Option<i64>; 4]);

fn cpu_memory(resources: &Value) -> CpuMemory {
    let holder = json!({ "resources": resources });
    let get = |kind: &str, name: &str| {
        let text = spec::resource(&holder, kind, name)?;
        if name == "cpu" {
            spec::milli(&text)
        } else {
            spec::bytes(&text)
        }
    };
    CpuMemory([
        get("requests", "cpu"),
        get("limits", "cpu"),
        get("requests", "memory"),
        get("limits", "memory"),
    ])
}

/// The spec asks for other cpu/memory than allocated (a resize to decide on).
pub fn differs(pod: &Value, allocation: &Allocation) -> bool {
    spec::containers(pod, "containers").iter().any(|c| {
        let allocated = allocation.get(str_field(c, "name")).unwrap_or(&Value::Null);
        cpu_memory(c.get("resources").unwrap_or(&Value::Null)) != cpu_memory(allocated)
    })
}

/// The pod as kubelet runs it: containers with their allocated resources. A container whose
/// resources equal the allocation is left byte for byte as it is (the stored hash is of it).
pub fn allocated_pod(pod: &Value, allocation: &Allocation) -> Value {
    let mut out = pod.clone();
    let Some(containers) = out
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
    else {
        return out;
    };
    for c in containers.iter_mut() {
        let Some(allocated) = allocation.get(str_field(c, "name")).cloned() else {
            continue;
        };
        let Some(obj) = c.as_object_mut() else {
            continue;
        };
        if obj.get("resources").unwrap_or(&Value::Null) == &allocated {
            continue;
        }
        if allocated.is_null() {
            obj.remove("resources");
        } else {
            obj.insert("resources".into(), allocated);
        }
    }
    out
}

/// cpu (milli) and memory (bytes) requests of an allocation; a request defaults to the limit.
pub fn requests(allocation: &Allocation) -> (i64, i64) {
    allocation.values().fold((0, 0), |(cpu, mem), resources| {
        let holder = json!({ "resources": resources });
        let cpu_req = spec::request(&holder, "cpu").and_then(|q| spec::milli(&q));
        let mem_req = spec::request(&holder, "memory").and_then(|q| spec::bytes(&q));
        (cpu + cpu_req.unwrap_or(0), mem + mem_req.unwrap_or(0))
    })
}

/// Why a resize waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// It would fit the node, but not next to the other pods now; retried on every sync.
    Deferred(String),
    /// It cannot fit the node at all.
    Infeasible(String),
}

impl Pending {
    pub fn reason(&self) -> &'static str {
        match self {
            Pending::Deferred(_) => "Deferred",
            Pending::Infeasible(_) => "Infeasible",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Pending::Deferred(m) | Pending::Infeasible(m) => m,
        }
    }
}

/// kubelet's feasibility check of a resize: the pod's new requests against the node's
/// allocatable (Infeasible), then with the other pods' allocated requests (Deferred). Amounts
/// are (milli-cpu, bytes); the messages are kubelet's.
pub fn decide(wanted: (i64, i64), others: (i64, i64), allocatable: (i64, i64)) -> Option<Pending> {
    let (cpu, mem) = wanted;
    if mem > allocatable.1 {
        return Some(Pending::Infeasible(format!(
            "Node didn't have enough capacity: memory, requested: {mem}, capacity: {}",
            allocatable.1
        )));
    }
    if cpu > allocatable.0 {
        return Some(Pending::Infeasible(format!(
            "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {}",
            allocatable.0
        )));
    }
    let short = |name: &str, want: i64, used: i64, capacity: i64| {
        (want + used > capacity).then(|| {
            Pending::Deferred(format!(
                "Node didn't have enough resource: {name}, requested: {want}, used: {used}, capacity: {capacity}"
            ))
        })
    };
    short("cpu", cpu, others.0, allocatable.0)
        .or_else(|| short("memory", mem, others.1, allocatable.1))
}

/// One pod's resize bookkeeping between syncs (kubelet's status manager and checkpoints).
#[derive(Default)]
pub(super) struct PodResize {
    pub pending: Option<Pending>,
    /// Accepted and not yet fully actuated.
    pub in_progress: bool,
    /// Why the last actuation failed (retried on the next sync).
    pub error: Option<String>,
    pub pending_since: Option<String>,
    pub in_progress_since: Option<String>,
    /// What was last sent to the runtime, by container name (compared from 1.33).
    pub actuated: HashMap<String, Applied>,
}

/// The resizable part of a container's CRI resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Applied {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub memory_limit: i64,
}

impl From<&LinuxContainerResources> for Applied {
    fn from(r: &LinuxContainerResources) -> Self {
        Applied {
            cpu_shares: r.cpu_shares,
            cpu_quota: r.cpu_quota,
            memory_limit: r.memory_limit_in_bytes,
        }
    }
}

/// A CRI limit where 0 means none, as an ordered value (none = largest).
fn ordered(limit: i64) -> i64 {
    if limit <= 0 { i64::MAX } else { limit }
}

impl Shared {
    /// kubelet's handlePodResourcesResize: admits a resize when it fits and returns the pod as
    /// allocated (the spec's resources where admitted, the earlier allocation otherwise).
    pub(super) fn admit_resize(&self, pod: &Value, uid: &str, st: &mut PodResize) -> Value {
        let mut allocations = lock(&self.allocations);
        let current = allocations
            .entry(uid.to_owned())
            .or_insert_with(|| allocation_of(pod))
            .clone();
        if !differs(pod, &current) {
            st.pending = None;
            return allocated_pod(pod, &current);
        }
        let wanted = allocation_of(pod);
        let others = allocations
            .iter()
            .filter(|(other, _)| other.as_str() != uid)
            .map(|(_, a)| requests(a))
            .fold((0, 0), |acc, r| (acc.0 + r.0, acc.1 + r.1));
        st.pending = decide(requests(&wanted), others, self.allocatable);
        if st.pending.is_some() {
            return allocated_pod(pod, &current);
        }
        allocations.insert(uid.to_owned(), wanted.clone());
        st.in_progress = true;
        st.error = None;
        allocated_pod(pod, &wanted)
    }

    /// kubelet's doPodResizeAction: brings the running containers of `pod` (as allocated) and
    /// its pod cgroup to the allocated resources. An error aborts where it happens; the next
    /// sync starts over. CRI statuses it reads of containers it leaves unchanged go to `fresh`
    /// (by container ID), for the pod status of this sync.
    pub(super) async fn actuate_resize(
        &self,
        pod: &Value,
        sb: &Sandbox,
        runtime: &HashMap<String, Vec<Container>>,
        st: &mut PodResize,
        fresh: &mut HashMap<String, ContainerStatus>,
    ) -> Result<(), String> {
        let qos = spec::qos_class(pod);
        let mut changes: Vec<Change> = Vec::new();
        for c in spec::containers(pod, "containers") {
            let name = str_field(&c, "name").to_owned();
            let Some(newest) = runtime.get(&name).and_then(|l| l.first()) else {
                continue;
            };
            if newest.state != ContainerState::ContainerRunning as i32 {
                continue;
            }
            let desired = spec::linux_resources(&c, qos, self.node_memory);
            let current = match st.actuated.get(&name) {
                Some(a) if self.resize.edge_triggered() => *a,
                _ => {
                    let status = self
                        .cri
                        .container_status(&newest.id, false)
                        .await
                        .ok()
                        .and_then(|r| r.status);
                    let reported = status
                        .as_ref()
                        .and_then(|s| s.resources.as_ref())
                        .and_then(|r| r.linux.as_ref())
                        .map(Applied::from);
                    if let Some(s) = status {
                        fresh.insert(newest.id.clone(), s);
                    }
                    // Nothing to compare with: leave it to the next sync.
                    let Some(applied) = reported else { continue };
                    // A container this instance did not start: what runs is what was sent.
                    st.actuated.entry(name.clone()).or_insert(applied);
                    applied
                }
            };
            if Applied::from(&desired) != current {
                changes.push(Change {
                    name,
                    id: newest.id.clone(),
                    desired,
                    current,
                });
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        let parent = &sb.cgroup_parent;
        let target = spec::pod_cgroup_limits(pod);
        let now = cgroups::read_pod(parent).map_err(|e| format!("reading the pod cgroup: {e}"))?;

        // Memory first.
        let mut memory: Vec<&mut Change> = changes
            .iter_mut()
            .filter(|c| c.desired.memory_limit_in_bytes != c.current.memory_limit)
            .collect();
        if !memory.is_empty() {
            let pod_limit = target.memory_limit.unwrap_or(i64::MAX);
            let usage = cgroups::memory_usage(parent).map_err(|e| e.to_string())?;
            if usage >= pod_limit {
                return Err(format!(
                    "aborting attempt to set pod memory limit {pod_limit} at or below its current usage {usage}"
                ));
            }
            if pod_limit > now.memory_limit {
                cgroups::set_memory_limit(parent, target.memory_limit)
                    .map_err(|e| format!("pod memory limit: {e}"))?;
            }
            memory.sort_by_key(|c| {
                ordered(c.desired.memory_limit_in_bytes) > ordered(c.current.memory_limit)
            });
            for c in memory {
                let limit = ordered(c.desired.memory_limit_in_bytes);
                if limit < ordered(c.current.memory_limit)
                    && self.resize.checks_container_memory_usage()
                {
                    let usage = cgroups::memory_usage(&format!("{parent}/{}", c.id))
                        .map_err(|e| e.to_string())?;
                    if usage >= limit {
                        return Err(format!(
                            "aborting attempt to set container {} memory limit {limit} at or below its current usage {usage}",
                            c.name
                        ));
                    }
                }
                let mut send = c.desired.clone();
                send.cpu_shares = c.current.cpu_shares;
                send.cpu_quota = c.current.cpu_quota;
                fresh.remove(&c.id);
                self.update_container(c, send, st).await?;
            }
            if pod_limit < now.memory_limit {
                cgroups::set_memory_limit(parent, target.memory_limit)
                    .map_err(|e| format!("pod memory limit: {e}"))?;
            }
        }

        // Then cpu: the quota (limit) and shares (request) of the pod cgroup each grow before
        // and shrink after the containers.
        let mut cpu: Vec<&mut Change> = changes
            .iter_mut()
            .filter(|c| {
                c.desired.cpu_quota != c.current.cpu_quota
                    || c.desired.cpu_shares != c.current.cpu_shares
            })
            .collect();
        if !cpu.is_empty() {
            let pod_quota = target.cpu_quota.map_or(i64::MAX, ordered);
            let pod_shares = target.cpu_shares;
            let set_quota = || {
                cgroups::set_cpu_quota(parent, target.cpu_quota)
                    .map_err(|e| format!("pod cpu quota: {e}"))
            };
            let set_shares = || {
                cgroups::set_cpu_shares(parent, pod_shares)
                    .map_err(|e| format!("pod cpu shares: {e}"))
            };
            if pod_quota > now.cpu_quota {
                set_quota()?;
            }
            if pod_shares > now.cpu_shares {
                set_shares()?;
            }
            // A container's order follows its limit when that changes, else its request.
            cpu.sort_by_key(|c| {
                if c.desired.cpu_quota != c.current.cpu_quota {
                    ordered(c.desired.cpu_quota) > ordered(c.current.cpu_quota)
                } else {
                    c.desired.cpu_shares > c.current.cpu_shares
                }
            });
            for c in cpu {
                let mut send = c.desired.clone();
                send.memory_limit_in_bytes = c.current.memory_limit;
                fresh.remove(&c.id);
                self.update_container(c, send, st).await?;
            }
            if pod_quota < now.cpu_quota {
                set_quota()?;
            }
            if pod_shares < now.cpu_shares {
                set_shares()?;
            }
        }
        Ok(())
    }

    async fn update_container(
        &self,
        c: &mut Change,
        send: LinuxContainerResources,
        st: &mut PodResize,
    ) -> Result<(), String> {
        self.cri
            .update_container_resources(&c.id, send.clone())
            .await
            .map_err(|e| format!("UpdateContainerResources {}: {e}", c.name))?;
        c.current = Applied::from(&send);
        st.actuated.insert(c.name.clone(), c.current);
        Ok(())
    }
}

/// One container to resize.
struct Change {
    name: String,
    id: String,
    desired: LinuxContainerResources,
    current: Applied,
}

/// kubelet's MinShares and MinMilliCPULimit: at or below these the allocated value is reported.
const MIN_SHARES_MILLI: i64 = 2;
const MIN_CPU_LIMIT_MILLI: i64 = 10;

/// `containerStatuses[].resources` of a running container as kubelet fills it: the allocated
/// resources, with the cpu limit, memory limit and cpu request the runtime reports.
pub fn status_resources(allocated: &Value, runtime: Option<&LinuxContainerResources>) -> Value {
    let mut out = if allocated.is_object() {
        allocated.clone()
    } else {
        json!({})
    };
    let Some(r) = runtime else {
        return out;
    };
    let allocated_milli = |kind: &str| {
        spec::resource(&json!({ "resources": allocated }), kind, "cpu")
            .and_then(|q| spec::milli(&q))
            .unwrap_or(0)
    };
    if let Some(limits) = out.get_mut("limits").and_then(Value::as_object_mut) {
        let cpu_limit = if r.cpu_period > 0 && r.cpu_quota > 0 {
            r.cpu_quota * 1000 / r.cpu_period
        } else {
            0
        };
        if cpu_limit > 0
            && (cpu_limit > MIN_CPU_LIMIT_MILLI || allocated_milli("limits") > MIN_CPU_LIMIT_MILLI)
        {
            limits.insert("cpu".into(), json!(format_milli(cpu_limit)));
        }
        if r.memory_limit_in_bytes > 0 {
            limits.insert(
                "memory".into(),
                json!(format_bytes(r.memory_limit_in_bytes)),
            );
        }
    }
    if let Some(requests) = out.get_mut("requests").and_then(Value::as_object_mut) {
        // Shares back to milli-cpu, rounded up (kubelet's sharesToMilliCPU).
        let cpu_request = if r.cpu_shares >= 2 {
            (r.cpu_shares * 1000 + 1023) / 1024
        } else {
            0
        };
        if cpu_request > 0
            && (cpu_request > MIN_SHARES_MILLI || allocated_milli("requests") > MIN_SHARES_MILLI)
        {
            requests.insert("cpu".into(), json!(format_milli(cpu_request)));
        }
    }
    out
}

/// A milli-cpu amount as apimachinery prints a DecimalSI quantity: `500m`, `2`.
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// A byte count as apimachinery prints a BinarySI quantity: the largest binary suffix that
/// divides it (`64Mi`), else decimal (`1G`, `1500`).
pub fn format_bytes(bytes: i64) -> String {
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    let pick = |base: i64, suffixes: [&str; 6]| {
        let mut value = bytes;
        let mut suffix = None;
        for s in suffixes {
            if value == 0 || value % base != 0 {
                break;
            }
            value /= base;
            suffix = Some(s);
        }
        suffix.map(|s| format!("{value}{s}"))
    };
    pick(1024, BINARY)
        .or_else(|| pick(1000, DECIMAL))
        .unwrap_or_else(|| bytes.to_string())
}

/// A resize condition (1.33+), status True.
pub fn condition(kind: &str, since: &str, reason: &str, message: &str) -> Value {
    let mut c = json!({"type": kind, "status": "True", "lastProbeTime": null,
                       "lastTransitionTime": since});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

/// Whether the reported resources of every container with a status match its spec (cpu and
/// memory): kubelet (1.27–1.32) then has nothing left to report in `status.resize`.
pub fn settled(pod: &Value, statuses: &[Value]) -> bool {
    spec::containers(pod, "containers").iter().all(|c| {
        let reported = statuses
            .iter()
            .find(|s| s["name"] == c["name"])
            .and_then(|s| s.get("resources"));
        reported
            .is_none_or(|r| cpu_memory(r) == cpu_memory(c.get("resources").unwrap_or(&Value::Null)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: Value) -> Value {
        json!({"spec": {"containers": [{"name": "app", "image": "x", "resources": resources}]}})
    }

    #[test]
    fn release_behaviour() {
        let r = |minor, gate| ResizeRelease::new(minor, gate);
        assert!(!r(26, true).active());
        assert!(!r(30, false).active());
        assert!(r(27, true).active());
        assert!(!r(32, true).conditions() && r(33, true).conditions());
        assert!(r(31, true).reports_allocated() && !r(32, true).reports_allocated());
        assert!(r(33, true).reports_allocated());
        assert!(!r(31, true).resources_when_not_running());
        assert!(r(32, true).resources_when_not_running());
        assert!(!r(32, true).edge_triggered() && r(33, true).edge_triggered());
    }

    #[test]
    fn allocation_and_differences() {
        let p = pod(json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"cpu": "0.5", "memory": "128Mi"}}));
        let alloc = allocation_of(&p);
        assert!(!differs(&p, &alloc));
        // Same quantities written differently are no resize.
        let same = pod(json!({"requests": {"cpu": "0.1", "memory": "67108864"},
                              "limits": {"cpu": "500m", "memory": "128Mi"}}));
        assert!(!differs(&same, &alloc));
        let grown = pod(json!({"requests": {"cpu": "200m", "memory": "64Mi"},
                               "limits": {"cpu": "1", "memory": "128Mi"}}));
        assert!(differs(&grown, &alloc));
        // The allocated pod keeps the old resources; an unchanged pod stays identical.
        let as_allocated = allocated_pod(&grown, &alloc);
        assert_eq!(
            as_allocated["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "0.5"
        );
        assert_eq!(allocated_pod(&p, &alloc), p);
        // Requests default to limits; 100m + 64Mi.
        assert_eq!(requests(&alloc), (100, 64 << 20));
        let limit_only = allocation_of(&pod(json!({"limits": {"cpu": "2", "memory": "1Gi"}})));
        assert_eq!(requests(&limit_only), (2000, 1 << 30));
    }

    #[test]
    fn feasibility_like_kubelet() {
        let node = (4000, 8 << 30);
        assert_eq!(decide((1000, 1 << 30), (2000, 1 << 30), node), None);
        assert_eq!(
            decide((5000, 1 << 30), (0, 0), node),
            Some(Pending::Infeasible(
                "Node didn't have enough capacity: cpu, requested: 5000, capacity: 4000".into()
            ))
        );
        assert_eq!(
            decide((5000, 9 << 30), (0, 0), node).map(|p| p.message().to_owned()),
            Some(format!(
                "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                9u64 << 30,
                8u64 << 30
            ))
        );
        assert_eq!(
            decide((3000, 1 << 30), (1500, 0), node),
            Some(Pending::Deferred(
                "Node didn't have enough resource: cpu, requested: 3000, used: 1500, capacity: 4000"
                    .into()
            ))
        );
        assert_eq!(
            decide((1000, 5 << 30), (0, 4 << 30), node).map(|p| p.reason()),
            Some("Deferred")
        );
    }

    #[test]
    fn status_resources_read_back_from_the_runtime() {
        let allocated = json!({"requests": {"cpu": "150m", "memory": "64Mi"},
                               "limits": {"cpu": "0.5", "memory": "128Mi"}});
        let runtime = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 30_000,
            cpu_shares: 204,
            memory_limit_in_bytes: 96 << 20,
            ..Default::default()
        };
        assert_eq!(
            status_resources(&allocated, Some(&runtime)),
            json!({"requests": {"cpu": "200m", "memory": "64Mi"},
                   "limits": {"cpu": "300m", "memory": "96Mi"}})
        );
        // Without a runtime report, the allocation.
        assert_eq!(status_resources(&allocated, None), allocated);
        // BestEffort: nothing to override; the runtime's minimum shares are not reported.
        let none = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_shares: 2,
            ..Default::default()
        };
        assert_eq!(status_resources(&Value::Null, Some(&none)), json!({}));
        let tiny = json!({"requests": {"cpu": "1m"}});
        assert_eq!(status_resources(&tiny, Some(&none)), tiny);
    }

    #[test]
    fn quantities_print_like_apimachinery() {
        assert_eq!(format_milli(500), "500m");
        assert_eq!(format_milli(2000), "2");
        assert_eq!(format_milli(1500), "1500m");
        assert_eq!(format_bytes(64 << 20), "64Mi");
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(1536), "1536");
        assert_eq!(format_bytes(3 << 10), "3Ki");
        assert_eq!(format_bytes(1_000_000_000), "1G");
        assert_eq!(format_bytes(1500), "1500");
        assert_eq!(format_bytes(1_000_001), "1000001");
    }

    #[test]
    fn settled_compares_reported_with_spec() {
        let p = pod(json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "1"}}));
        let done = [json!({"name": "app", "resources":
            {"requests": {"cpu": "200m"}, "limits": {"cpu": "1000m"}}})];
        assert!(settled(&p, &done));
        let behind = [json!({"name": "app", "resources":
            {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}})];
        assert!(!settled(&p, &behind));
        assert!(settled(&p, &[json!({"name": "app"})]));
    }
}
