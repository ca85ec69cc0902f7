//! Kubernetes resources ↔ CRI resources, QoS classes and the checks a resize must pass.
//!
//! Pure arithmetic with kubelet's formulas (`pkg/kubelet/cm/helpers_linux.go`,
//! `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`, `pkg/apis/core/v1/helper/qos`) and
//! the LimitRanger admission plugin's checks. cpu is in millicores and memory in bytes
//! throughout, as kubelet computes them (`MilliValue` / `Value`, rounded up).
//!
//! Decisions:
//! - The cfs period is kubelet's default 100 ms (the `CPUCFSQuotaPeriod` gate is off by default)
//!   and cfs quota enforcement is on (kubelet's `cpuCFSQuota` default).
//! - Init containers come in the pod's order as [`InitContainer`]s, sidecars (`restartPolicy:
//!   Always`) marked: kubelet's pod totals add each sidecar to the app containers' sum and to
//!   every classic init container after it.
//! - Pod overhead and pod-level resources are not modelled.

use std::fmt;

use serde_json::Value;

use crate::quantity::Quantity;
use crate::resources::{ResourceField, ResourceName, Resources, parse_quantity};

/// kubelet's `MinShares`, `MaxShares` (kernel bounds of cpu.shares) and `SharesPerCPU`.
pub(crate) const MIN_SHARES: i64 = 2;
pub(crate) const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
use crate::resources::MILLI_PER_CPU;
/// kubelet's `QuotaPeriod` (100 ms in µs) and `MinQuotaPeriod` (1 ms, the kernel's floor).
pub(crate) const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        })
    }
}

/// kubelet's `GetPodQOS` restricted to cpu and memory, over all (init + app) containers: only
/// values above zero count; Guaranteed needs a cpu and a memory limit on every container and
/// the summed requests equal to the summed limits.
pub fn qos_class(containers: &[Resources]) -> QosClass {
    let positive = |v: Option<i64>| v.filter(|&v| v > 0);
    let sum = |field: fn(&Resources) -> Option<i64>| -> Option<i128> {
        containers
            .iter()
            .filter_map(|c| positive(field(c)))
            .map(i128::from)
            .reduce(|a, b| a + b)
    };
    let requests = [sum(|c| c.cpu_request), sum(|c| c.memory_request)];
    let limits = [sum(|c| c.cpu_limit), sum(|c| c.memory_limit)];
    if requests.iter().chain(&limits).all(Option::is_none) {
        return QosClass::BestEffort;
    }
    let every_limit_set = containers
        .iter()
        .all(|c| positive(c.cpu_limit).is_some() && positive(c.memory_limit).is_some());
    // Every request has an equal limit; limits without requests break the equal-count rule.
    let requests_match = requests
        .iter()
        .zip(&limits)
        .all(|(req, lim)| req.is_none() || req == lim);
    let same_count = requests.iter().flatten().count() == limits.iter().flatten().count();
    if every_limit_set && requests_match && same_count {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// What kubelet passes to CRI for one container (LinuxContainerResources subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CriResources {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub cpu_period: i64,
    pub memory_limit_in_bytes: i64,
}

/// kubelet's `MilliCPUToShares`: 0 → 2, else milli×1024/1000 clamped to [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    let shares = i128::from(milli) * i128::from(SHARES_PER_CPU) / i128::from(MILLI_PER_CPU);
    shares.clamp(i128::from(MIN_SHARES), i128::from(MAX_SHARES)) as i64
}

/// kubelet's `MilliCPUToQuota` for a period: 0 (no quota) for 0, else at least 1 ms.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    let quota = i128::from(milli) * i128::from(period) / i128::from(MILLI_PER_CPU);
    quota.clamp(i128::from(MIN_QUOTA), i128::from(i64::MAX)) as i64
}

/// kubelet's `sharesToMilliCPU`: ceil(shares×1000/1024), 0 below the minimum shares.
pub(crate) fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    let numerator = i128::from(shares) * i128::from(MILLI_PER_CPU);
    let denominator = i128::from(SHARES_PER_CPU);
    ((numerator + denominator - 1) / denominator) as i64
}

/// kubelet's `quotaToMilliCPU`: -1 (unlimited) → 0, else quota×1000/period.
pub(crate) fn quota_to_milli_cpu(quota: i64, period: i64) -> i64 {
    if quota == -1 || period == 0 {
        return 0;
    }
    (i128::from(quota) * i128::from(MILLI_PER_CPU) / i128::from(period)) as i64
}

/// How the kubelet turns an explicit zero cpu request into shares: kubernetes PR 108832, first
/// released in 1.26, gives it the minimum shares; before, a zero request took the limit's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroCpuRequest {
    /// Before 1.26: `cpuRequest.IsZero()` falls back to the limit.
    TakesTheLimit,
    /// 1.26 and later: only an absent request falls back to the limit; zero is 2 shares.
    #[default]
    MinimumShares,
}

impl ZeroCpuRequest {
    /// The rule of the kubelet that reports `version` (`v1.30.7`); an unknown version is taken
    /// for a current kubelet.
    pub fn of_kubelet(version: Option<&str>) -> Self {
        match version.and_then(|v| crate::hashing::KubeletVersion::parse(v).ok()) {
            Some(v) if v.minor() < 26 => ZeroCpuRequest::TakesTheLimit,
            _ => ZeroCpuRequest::MinimumShares,
        }
    }
}

/// What kubelet passes to CRI for one container (`calculateLinuxResources`): shares from the
/// request (from the limit when the request is absent — or zero, before 1.26: `rule`), quota
/// from the limit (0 = none), the memory limit in bytes (0 = none).
pub fn cri_resources(r: &Resources, rule: ZeroCpuRequest) -> CriResources {
    let request = match rule {
        ZeroCpuRequest::TakesTheLimit => r.cpu_request.filter(|&milli| milli != 0),
        ZeroCpuRequest::MinimumShares => r.cpu_request,
    };
    let share_basis = request.or(r.cpu_limit).unwrap_or(0);
    CriResources {
        cpu_shares: milli_cpu_to_shares(share_basis),
        cpu_quota: milli_cpu_to_quota(r.cpu_limit.unwrap_or(0), QUOTA_PERIOD),
        cpu_period: QUOTA_PERIOD,
        memory_limit_in_bytes: r.memory_limit.unwrap_or(0),
    }
}

/// kubelet's `toKubeContainerResources`: what the runtime reports, back as resources (memory
/// requests are not a runtime notion and stay unset).
pub fn from_cri(c: &CriResources) -> Resources {
    let positive = |v: i64| (v > 0).then_some(v);
    Resources {
        cpu_request: positive(c.cpu_shares)
            .map(shares_to_milli_cpu)
            .and_then(positive),
        cpu_limit: positive(c.cpu_period)
            .map(|period| quota_to_milli_cpu(c.cpu_quota, period))
            .and_then(positive),
        memory_request: None,
        memory_limit: positive(c.memory_limit_in_bytes),
    }
}

/// Pod-level cgroup values kubelet writes (`ResourceConfigForPod`, cpu/memory only, no pod
/// overhead). `None` quota / memory limit = unlimited; the period is always kubelet's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCgroupConfig {
    pub cpu_shares: u64,
    pub cpu_quota: Option<i64>,
    pub cpu_period: u64,
    pub memory_limit: Option<i64>,
}

/// One of the pod's `initContainers`, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitContainer {
    pub resources: Resources,
    /// A sidecar: `restartPolicy: Always`, running beside the app containers.
    pub sidecar: bool,
}

/// `ResourceConfigForPod`: shares from the pod's requests, quota and memory limit from its
/// limits — for Burstable pods only when every container (init ones too) has that limit;
/// BestEffort pods get the minimum shares and nothing else.
pub fn pod_cgroup_config(
    app: &[Resources],
    init: &[InitContainer],
    qos: QosClass,
) -> PodCgroupConfig {
    let totals = pod_totals(app, init);
    let every = |field: fn(&Resources) -> Option<i64>| {
        app.iter()
            .chain(init.iter().map(|c| &c.resources))
            .all(|c| field(c).is_some_and(|v| v > 0))
    };
    let quota = || milli_cpu_to_quota(totals.cpu_limit.unwrap_or(0), QUOTA_PERIOD);
    let memory = || totals.memory_limit.unwrap_or(0);
    let shares = milli_cpu_to_shares(totals.cpu_request.unwrap_or(0)) as u64;
    let (cpu_shares, cpu_quota, memory_limit) = match qos {
        QosClass::Guaranteed => (shares, Some(quota()), Some(memory())),
        QosClass::Burstable => (
            shares,
            every(|c| c.cpu_limit).then(quota),
            every(|c| c.memory_limit).then(memory),
        ),
        QosClass::BestEffort => (MIN_SHARES as u64, None, None),
    };
    PodCgroupConfig {
        cpu_shares,
        cpu_quota,
        cpu_period: QUOTA_PERIOD as u64,
        memory_limit,
    }
}

/// The pod's effective requests and limits (`PodRequests` / `PodLimits`): the sum over the app
/// containers and the sidecars, raised to what any classic init container needs while it runs
/// (its own value plus the sidecars started before it) where that is bigger. A value is `None`
/// when no container sets it.
pub(crate) fn pod_totals(app: &[Resources], init: &[InitContainer]) -> Resources {
    let total = |field: fn(&Resources) -> Option<i64>| {
        let add = |a: Option<i128>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + i128::from(b)),
            (a, b) => a.or(b.map(i128::from)),
        };
        let mut sum = app.iter().map(field).fold(None, add);
        let mut sidecars: Option<i128> = None;
        let mut while_init: Option<i128> = None;
        for c in init {
            let own = field(&c.resources);
            let running = if c.sidecar {
                sum = add(sum, own);
                sidecars = add(sidecars, own);
                sidecars
            } else {
                add(sidecars, own)
            };
            while_init = while_init.max(running);
        }
        let effective = match (sum, while_init) {
            (Some(s), Some(m)) => Some(s.max(m)),
            (s, m) => s.or(m),
        };
        effective.map(|v| v.min(i128::from(i64::MAX)) as i64)
    };
    Resources {
        cpu_request: total(|c| c.cpu_request),
        cpu_limit: total(|c| c.cpu_limit),
        memory_request: total(|c| c.memory_request),
        memory_limit: total(|c| c.memory_limit),
    }
}

/// Why a resize is refused; each message is the status a platform team reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the resize would change the pod's QoS class from {from} to {to}, which cannot be done in place"
    )]
    QosChange { from: QosClass, to: QosClass },
    #[error(
        "container {container} has no {resource}: an in-place resize cannot add a resource the container was created without"
    )]
    AddsResource {
        container: String,
        resource: ResourceField,
    },
    #[error("container {container} has {resource} set: an in-place resize cannot remove it")]
    RemovesResource {
        container: String,
        resource: ResourceField,
    },
    #[error("container {container}: {resource} request {request} is above its limit {limit}")]
    RequestAboveLimit {
        container: String,
        resource: ResourceName,
        request: String,
        limit: String,
    },
    #[error("the pod has no container named {0}")]
    UnknownContainer(String),
    #[error(
        "Infeasible: the pod would request {requested} {resource} but the node has only {allocatable} allocatable"
    )]
    ExceedsAllocatable {
        resource: ResourceName,
        requested: String,
        allocatable: String,
    },
    #[error("LimitRange {name}: {message}")]
    LimitRange { name: String, message: String },
}

/// The checks before actuating a resize of the app containers `old` → `new` (every app
/// container of the pod, by name, in both): a container keeps the set of values it has (none
/// added, none removed); requests stay within limits; the QoS class (over app and init
/// containers) stays; the pod's requests fit the node's allocatable cpu / memory (given in
/// `allocatable`'s request fields; unset = not checked); and the `LimitRange` objects (v1 JSON)
/// of the namespace accept the containers that change and the pod as a whole.
pub fn check_resize(
    old: &[(String, Resources)],
    new: &[(String, Resources)],
    init: &[InitContainer],
    allocatable: &Resources,
    limit_ranges: &[Value],
) -> Result<(), Refusal> {
    let mut changed = Vec::new();
    for (name, after) in new {
        let before = old
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r)
            .ok_or_else(|| Refusal::UnknownContainer(name.clone()))?;
        for field in ResourceField::ALL {
            match (field.get(before), field.get(after)) {
                (None, Some(_)) => {
                    return Err(Refusal::AddsResource {
                        container: name.clone(),
                        resource: field,
                    });
                }
                (Some(_), None) => {
                    return Err(Refusal::RemovesResource {
                        container: name.clone(),
                        resource: field,
                    });
                }
                _ => {}
            }
        }
        check_request_within_limit(name, after)?;
        if before != after {
            changed.push((name.as_str(), after));
        }
    }

    let with_init = |containers: &[(String, Resources)]| -> Vec<Resources> {
        containers
            .iter()
            .map(|(_, r)| *r)
            .chain(init.iter().map(|c| c.resources))
            .collect()
    };
    let from = qos_class(&with_init(old));
    let to = qos_class(&with_init(new));
    if from != to {
        return Err(Refusal::QosChange { from, to });
    }

    let app: Vec<Resources> = new.iter().map(|(_, r)| *r).collect();
    let totals = pod_totals(&app, init);
    for (resource, requested, available) in [
        (
            ResourceName::Cpu,
            totals.cpu_request,
            allocatable.cpu_request,
        ),
        (
            ResourceName::Memory,
            totals.memory_request,
            allocatable.memory_request,
        ),
    ] {
        if let (Some(requested), Some(available)) = (requested, available)
            && requested > available
        {
            return Err(Refusal::ExceedsAllocatable {
                resource,
                requested: resource.format(requested),
                allocatable: resource.format(available),
            });
        }
    }

    for limit_range in limit_ranges {
        check_limit_range(limit_range, &changed, &totals)?;
    }
    Ok(())
}

fn check_request_within_limit(container: &str, r: &Resources) -> Result<(), Refusal> {
    for (resource, request, limit) in [
        (ResourceName::Cpu, r.cpu_request, r.cpu_limit),
        (ResourceName::Memory, r.memory_request, r.memory_limit),
    ] {
        if let (Some(request), Some(limit)) = (request, limit)
            && request > limit
        {
            return Err(Refusal::RequestAboveLimit {
                container: container.to_owned(),
                resource,
                request: resource.format(request),
                limit: resource.format(limit),
            });
        }
    }
    Ok(())
}

/// Whether the pod fits the node now (kubelet defers a resize that does not): the requests of
/// every other pod on the node (one [`pod_totals`] each) plus this pod's, against the node's
/// allocatable (in the request fields; an unset allocatable value is not checked).
pub(crate) fn fits_node(
    other_pods: &[Resources],
    pod: &Resources,
    allocatable: &Resources,
) -> bool {
    let fits = |field: fn(&Resources) -> Option<i64>| {
        let Some(available) = field(allocatable) else {
            return true;
        };
        let used: i128 = other_pods
            .iter()
            .chain(std::iter::once(pod))
            .filter_map(field)
            .map(i128::from)
            .sum();
        used <= i128::from(available)
    };
    fits(|r| r.cpu_request) && fits(|r| r.memory_request)
}

/// The LimitRanger plugin's validation of one v1 LimitRange: `Container` items against each
/// changed container, `Pod` items against the pod's totals; min, max and maxLimitRequestRatio
/// on cpu and memory. Every violation is reported (one message, or `[a, b]` like Go's
/// aggregated errors).
fn check_limit_range(
    limit_range: &Value,
    changed: &[(&str, &Resources)],
    pod: &Resources,
) -> Result<(), Refusal> {
    let name = limit_range
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)")
        .to_owned();
    let refuse = |message: String| Refusal::LimitRange {
        name: name.clone(),
        message,
    };
    let items = match limit_range.pointer("/spec/limits") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(refuse("spec.limits: must be a list".to_owned())),
    };
    let mut violations = Vec::new();
    for (index, item) in items.iter().enumerate() {
        // Other types (PersistentVolumeClaim) do not concern a pod resize.
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let subjects: Vec<&Resources> = match kind {
            "Container" => changed.iter().map(|(_, r)| *r).collect(),
            "Pod" if !changed.is_empty() => vec![pod],
            _ => continue,
        };
        for constraint in [Constraint::Min, Constraint::Max, Constraint::Ratio] {
            for resource in [ResourceName::Cpu, ResourceName::Memory] {
                let path = format!("spec.limits[{index}].{}.{resource}", constraint.key());
                let Some(value) = item
                    .get(constraint.key())
                    .and_then(|list| list.get(resource.key()))
                else {
                    continue;
                };
                let enforced = parse_quantity(&path, value).map_err(|e| refuse(e.to_string()))?;
                let enforced = Enforced::new(&enforced)
                    .ok_or_else(|| refuse(format!("{path}: quantity is too large")))?;
                for subject in &subjects {
                    if let Some(message) = constraint.violation(kind, resource, &enforced, subject)
                    {
                        violations.push(message);
                    }
                }
            }
        }
    }
    match violations.len() {
        0 => Ok(()),
        1 => Err(refuse(violations.remove(0))),
        _ => Err(refuse(format!("[{}]", violations.join(", ")))),
    }
}

#[derive(Clone, Copy)]
enum Constraint {
    Min,
    Max,
    Ratio,
}

/// A LimitRange value: its text as the API prints it and its amount in milli-units (the
/// precision LimitRanger compares at).
struct Enforced {
    text: String,
    milli: i128,
}

impl Enforced {
    fn new(q: &Quantity) -> Option<Self> {
        let milli = match q.milli_value() {
            Some(m) => i128::from(m),
            None => i128::from(q.value()?) * 1000,
        };
        Some(Enforced {
            text: q.to_json_text().ok()?,
            milli,
        })
    }
}

impl Constraint {
    fn key(self) -> &'static str {
        match self {
            Constraint::Min => "min",
            Constraint::Max => "max",
            Constraint::Ratio => "maxLimitRequestRatio",
        }
    }

    /// LimitRanger's message for a violation, if any (its wording, so that it reads like the
    /// API server's own refusals).
    fn violation(
        self,
        kind: &str,
        resource: ResourceName,
        enforced: &Enforced,
        r: &Resources,
    ) -> Option<String> {
        let (request, limit) = match resource {
            ResourceName::Cpu => (r.cpu_request, r.cpu_limit),
            ResourceName::Memory => (r.memory_request, r.memory_limit),
        };
        // Amounts in milli-units, as LimitRanger compares them.
        let milli = |v: i64| match resource {
            ResourceName::Cpu => i128::from(v),
            ResourceName::Memory => i128::from(v) * 1000,
        };
        let e = &enforced.text;
        match self {
            Constraint::Min => {
                let Some(req) = request else {
                    return Some(format!(
                        "minimum {resource} usage per {kind} is {e}.  No request is specified"
                    ));
                };
                if milli(req) < enforced.milli {
                    return Some(format!(
                        "minimum {resource} usage per {kind} is {e}, but request is {}",
                        resource.format(req)
                    ));
                }
                let lim = limit.filter(|&l| milli(l) < enforced.milli)?;
                Some(format!(
                    "minimum {resource} usage per {kind} is {e}, but limit is {}",
                    resource.format(lim)
                ))
            }
            Constraint::Max => {
                let Some(lim) = limit else {
                    return Some(format!(
                        "maximum {resource} usage per {kind} is {e}.  No limit is specified"
                    ));
                };
                if milli(lim) > enforced.milli {
                    return Some(format!(
                        "maximum {resource} usage per {kind} is {e}, but limit is {}",
                        resource.format(lim)
                    ));
                }
                let req = request.filter(|&r| milli(r) > enforced.milli)?;
                Some(format!(
                    "maximum {resource} usage per {kind} is {e}, but request is {}",
                    resource.format(req)
                ))
            }
            Constraint::Ratio => {
                let Some(req) = request.filter(|&r| r != 0) else {
                    return Some(format!(
                        "{resource} max limit to request ratio per {kind} is {e}, but no request is specified or request is 0"
                    ));
                };
                let Some(lim) = limit.filter(|&l| l != 0) else {
                    return Some(format!(
                        "{resource} max limit to request ratio per {kind} is {e}, but no limit is specified or limit is 0"
                    ));
                };
                let ratio = lim as f64 / req as f64;
                (ratio * 1000.0 > enforced.milli as f64).then(|| {
                    format!(
                        "{resource} max limit to request ratio per {kind} is {e}, but provided ratio is {ratio:.6}"
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    const MI: i64 = 1024 * 1024;

    fn res(
        cpu_req: Option<i64>,
        cpu_lim: Option<i64>,
        mem_req: Option<i64>,
        mem_lim: Option<i64>,
    ) -> Resources {
        Resources {
            cpu_request: cpu_req,
            cpu_limit: cpu_lim,
            memory_request: mem_req,
            memory_limit: mem_lim,
        }
    }

    /// Upstream test helpers write `getResourceList(cpu, memory)` with quantity strings; this
    /// reads the same notation through the real parser, so the expectations below stay in the
    /// units upstream wrote them in.
    fn req_lim(requests: (&str, &str), limits: (&str, &str)) -> Resources {
        let list = |(cpu, memory): (&str, &str)| {
            let mut m = Map::new();
            if !cpu.is_empty() {
                m.insert("cpu".into(), json!(cpu));
            }
            if !memory.is_empty() {
                m.insert("memory".into(), json!(memory));
            }
            Value::Object(m)
        };
        Resources::from_requirements(&json!({"requests": list(requests), "limits": list(limits)}))
            .expect("test quantities parse")
    }

    #[test]
    fn reads_requirements_in_kubelet_units() {
        let r = Resources::from_requirements(&json!({
            "requests": {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
            "limits": {"cpu": "1.5", "memory": "1G", "nvidia.com/gpu": "1"}
        }))
        .expect("valid");
        assert_eq!(
            r,
            res(Some(250), Some(1500), Some(64 * MI), Some(1_000_000_000))
        );
        // Sub-milli cpu rounds up like MilliValue; bare numbers are quantities too.
        let r =
            Resources::from_requirements(&json!({"requests": {"cpu": "0.0001", "memory": 1024}}))
                .expect("valid");
        assert_eq!(r, res(Some(1), None, Some(1024), None));
        assert_eq!(
            Resources::from_requirements(&json!({})),
            Ok(Resources::default())
        );
        assert_eq!(
            Resources::from_requirements(&Value::Null),
            Ok(Resources::default())
        );
    }

    #[test]
    fn bad_quantities_name_the_field() {
        let err = |v: Value| {
            Resources::from_requirements(&v)
                .expect_err("invalid")
                .to_string()
        };
        assert!(
            err(json!({"limits": {"memory": "12XB"}}))
                .starts_with("limits.memory: invalid quantity \"12XB\"")
        );
        assert_eq!(
            err(json!({"requests": {"cpu": "-1"}})),
            "requests.cpu: must not be negative"
        );
        assert_eq!(
            err(json!({"requests": {"cpu": "1e100"}})),
            "requests.cpu: quantity is too large"
        );
        assert_eq!(
            err(json!({"requests": {"cpu": true}})),
            "requests.cpu: must be a quantity string"
        );
        assert_eq!(err(json!({"requests": []})), "requests: must be an object");
        assert_eq!(err(json!("1")), "resources: must be an object");
    }

    #[test]
    fn writes_requirements_back_in_canonical_form() {
        let r = res(Some(500), Some(2000), Some(64 * MI), Some(1_000_000_000));
        assert_eq!(
            r.to_requirements(),
            json!({"requests": {"cpu": "500m", "memory": "64Mi"},
                   "limits": {"cpu": "2", "memory": "1000000000"}})
        );
        assert_eq!(
            res(None, Some(1), None, None).to_requirements(),
            json!({"limits": {"cpu": "1m"}})
        );
        assert_eq!(Resources::default().to_requirements(), json!({}));
        // And it reads back to the same values.
        let back = Resources::from_requirements(&r.to_requirements()).expect("round trip");
        assert_eq!(back, r);
    }

    #[test]
    fn overlay_replaces_what_is_named_and_defaults_requests() {
        let current = res(Some(100), Some(200), None, Some(128 * MI));
        let desired = res(None, Some(400), None, Some(256 * MI));
        // cpu request kept; memory request was unset in both, so it defaults to the new limit.
        assert_eq!(
            current.overlay(&desired),
            res(Some(100), Some(400), Some(256 * MI), Some(256 * MI))
        );
        assert_eq!(current.overlay(&Resources::default()), current);
        let only_request = res(Some(300), None, None, None);
        assert_eq!(
            current.overlay(&only_request),
            res(Some(300), Some(200), None, Some(128 * MI))
        );
    }

    /// qos_test.go `TestComputePodQOS` (container-level cases).
    #[test]
    fn qos_like_kubelet() {
        let g = || req_lim(("100m", "100Mi"), ("100m", "100Mi"));
        let be = || req_lim(("", ""), ("", ""));
        let cases: Vec<(&str, Vec<Resources>, QosClass)> = vec![
            ("guaranteed", vec![g()], QosClass::Guaranteed),
            (
                "guaranteed-guaranteed",
                vec![g(), g()],
                QosClass::Guaranteed,
            ),
            (
                "best-effort-best-effort",
                vec![be(), be()],
                QosClass::BestEffort,
            ),
            ("best-effort", vec![be()], QosClass::BestEffort),
            (
                "best-effort-burstable",
                vec![be(), req_lim(("1", ""), ("2", ""))],
                QosClass::Burstable,
            ),
            (
                "best-effort-guaranteed",
                vec![be(), req_lim(("10m", "100Mi"), ("10m", "100Mi"))],
                QosClass::Burstable,
            ),
            (
                "burstable-cpu-guaranteed-memory",
                vec![req_lim(("", "100Mi"), ("", "100Mi"))],
                QosClass::Burstable,
            ),
            (
                "burstable-no-limits",
                vec![req_lim(("100m", "100Mi"), ("", ""))],
                QosClass::Burstable,
            ),
            (
                "burstable-guaranteed",
                vec![req_lim(("1", "100Mi"), ("2", "100Mi")), g()],
                QosClass::Burstable,
            ),
            (
                "burstable-unbounded-but-requests-match-limits",
                vec![
                    req_lim(("100m", "100Mi"), ("200m", "200Mi")),
                    req_lim(("100m", "100Mi"), ("", "")),
                ],
                QosClass::Burstable,
            ),
            (
                "burstable-1",
                vec![req_lim(("10m", "100Mi"), ("100m", "200Mi"))],
                QosClass::Burstable,
            ),
            (
                "burstable-2",
                vec![req_lim(("0", "0"), ("100m", "200Mi"))],
                QosClass::Burstable,
            ),
            (
                "best-effort-hugepages (zero cpu/memory)",
                vec![req_lim(("0", "0"), ("0", "0"))],
                QosClass::BestEffort,
            ),
            // init-container: app best-effort, init burstable, all in one list.
            (
                "init-container",
                vec![be(), req_lim(("10m", "100Mi"), ("100m", "200Mi"))],
                QosClass::Burstable,
            ),
        ];
        for (name, containers, want) in cases {
            assert_eq!(qos_class(&containers), want, "{name}");
        }
        // Limits without requests (no API defaulting applied): requests and limits differ in
        // count, so not Guaranteed.
        assert_eq!(
            qos_class(&[req_lim(("", ""), ("1", "1Gi"))]),
            QosClass::Burstable
        );
    }

    /// helpers_linux_test.go `TestMilliCPUToShares`, `TestMilliCPUToQuota`,
    /// `TestSharesToMilliCPU`, `TestQuotaToMilliCPU`.
    #[test]
    fn kubelet_cpu_conversions() {
        for (milli, shares) in [
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 3),
            (100, 102),
            (500, 512),
            (1000, 1024),
            (255_999, 262_142),
            (256_000, 262_144),
            (256_001, 262_144),
            (1_000_000, 262_144),
            (-1, 2),
            (-1_000_000, 2),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "shares of {milli}m");
        }
        for (milli, quota) in [
            (0, 0),
            (5, 1000),
            (9, 1000),
            (10, 1000),
            (200, 20_000),
            (500, 50_000),
            (1000, 100_000),
            (1500, 150_000),
        ] {
            assert_eq!(
                milli_cpu_to_quota(milli, 100_000),
                quota,
                "quota of {milli}m"
            );
        }
        for (shares, milli) in [
            (0, 0),
            (1, 0),
            (2, 2),
            (3, 3),
            (102, 100),
            (512, 500),
            (1024, 1000),
            (262_144, 256_000),
            (-1, 0),
        ] {
            assert_eq!(
                shares_to_milli_cpu(shares),
                milli,
                "milli of {shares} shares"
            );
        }
        for (quota, period, milli) in [
            (-1, 100_000, 0),
            (0, 100_000, 0),
            (1000, 100_000, 10),
            (5000, 100_000, 50),
            (50_000, 100_000, 500),
            (100_000, 100_000, 1000),
            (200_000, 100_000, 2000),
            (5000, 5000, 1000),
            (1, 100_000, 0),
            (100, 100_000, 1),
        ] {
            assert_eq!(
                quota_to_milli_cpu(quota, period),
                milli,
                "milli of {quota}/{period}"
            );
        }
        // Huge inputs saturate instead of overflowing.
        assert_eq!(milli_cpu_to_shares(i64::MAX), 262_144);
        assert_eq!(milli_cpu_to_quota(i64::MAX, 100_000), i64::MAX);
    }

    /// docs/kubelet-resize.md "v1 resources → CRI LinuxContainerResources", with the numbers of
    /// helpers_linux_test.go (100m → 102 shares, 200m → quota 20000).
    #[test]
    fn container_cri_resources() {
        let r = req_lim(("100m", "100Mi"), ("200m", "200Mi"));
        let current = ZeroCpuRequest::MinimumShares;
        assert_eq!(
            cri_resources(&r, current),
            CriResources {
                cpu_shares: 102,
                cpu_quota: 20_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 200 * MI
            }
        );
        // No request: shares from the limit.
        let r = req_lim(("", ""), ("500m", ""));
        assert_eq!(
            cri_resources(&r, current),
            CriResources {
                cpu_shares: 512,
                cpu_quota: 50_000,
                cpu_period: 100_000,
                memory_limit_in_bytes: 0
            }
        );
        // Nothing set: minimum shares, no quota (0), period still set, no memory limit.
        assert_eq!(
            cri_resources(&Resources::default(), current),
            CriResources {
                cpu_shares: 2,
                cpu_quota: 0,
                cpu_period: 100_000,
                memory_limit_in_bytes: 0
            }
        );
        // A tiny limit still gets the 1 ms minimum quota.
        assert_eq!(
            cri_resources(&req_lim(("", ""), ("5m", "")), current).cpu_quota,
            1000
        );
        // An explicit zero request: the minimum shares from 1.26 (kubernetes PR 108832: only
        // an absent request falls back to the limit); before, it counted as none and took the
        // limit's (kubelet checked `cpuRequest.IsZero()`): 1 cpu → 1024 shares.
        let zero_request = req_lim(("0", ""), ("1", ""));
        assert_eq!(cri_resources(&zero_request, current).cpu_shares, 2);
        let before_1_26 = ZeroCpuRequest::of_kubelet(Some("v1.25.16"));
        assert_eq!(before_1_26, ZeroCpuRequest::TakesTheLimit);
        assert_eq!(cri_resources(&zero_request, before_1_26).cpu_shares, 1024);
        assert_eq!(
            ZeroCpuRequest::of_kubelet(Some("v1.26.0")),
            ZeroCpuRequest::MinimumShares
        );
        assert_eq!(
            ZeroCpuRequest::of_kubelet(None),
            ZeroCpuRequest::MinimumShares
        );
        // Zero both ways: the minimum shares under either rule.
        for rule in [current, before_1_26] {
            assert_eq!(
                cri_resources(&req_lim(("0", ""), ("0", "")), rule).cpu_shares,
                2
            );
        }
    }

    #[test]
    fn read_back_from_the_runtime() {
        // 102 shares → ceil(99.6) = 100m; quota 20000/100000 → 200m (TestSharesToMilliCPU /
        // TestQuotaToMilliCPU values).
        let c = CriResources {
            cpu_shares: 102,
            cpu_quota: 20_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 200 * MI,
        };
        assert_eq!(
            from_cri(&c),
            res(Some(100), Some(200), None, Some(200 * MI))
        );
        // Unlimited quota, minimum shares below 2, no memory limit: nothing read back.
        let c = CriResources {
            cpu_shares: 0,
            cpu_quota: -1,
            cpu_period: 100_000,
            memory_limit_in_bytes: 0,
        };
        assert_eq!(from_cri(&c), Resources::default());
        // No period reported: no limit, whatever the quota says.
        let c = CriResources {
            cpu_shares: 2,
            cpu_quota: 50_000,
            cpu_period: 0,
            memory_limit_in_bytes: 0,
        };
        assert_eq!(from_cri(&c), res(Some(2), None, None, None));
    }

    /// helpers_linux_test.go `TestResourceConfigForPod` (enforceCPULimits, default period):
    /// burstableShares = MilliCPUToShares(100) = 102, burstablePartialShares =
    /// MilliCPUToShares(200) = 204, burstableQuota = MilliCPUToQuota(200) = 20000,
    /// guaranteedQuota = MilliCPUToQuota(100) = 10000; memory 200Mi / 100Mi.
    #[test]
    fn pod_cgroup_like_resource_config_for_pod() {
        let config = |shares, quota, memory| PodCgroupConfig {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: 100_000,
            memory_limit: memory,
        };
        let cases: Vec<(&str, Vec<Resources>, Vec<Resources>, PodCgroupConfig)> = vec![
            (
                "besteffort",
                vec![req_lim(("", ""), ("", ""))],
                vec![],
                config(2, None, None),
            ),
            (
                "burstable-no-limits",
                vec![req_lim(("100m", "100Mi"), ("", ""))],
                vec![],
                config(102, None, None),
            ),
            (
                "burstable-with-limits",
                vec![req_lim(("100m", "100Mi"), ("200m", "200Mi"))],
                vec![],
                config(102, Some(20_000), Some(200 * MI)),
            ),
            (
                "burstable-partial-limits",
                vec![
                    req_lim(("100m", "100Mi"), ("200m", "200Mi")),
                    req_lim(("100m", "100Mi"), ("", "")),
                ],
                vec![],
                config(204, None, None),
            ),
            (
                "guaranteed",
                vec![req_lim(("100m", "100Mi"), ("100m", "100Mi"))],
                vec![],
                config(102, Some(10_000), Some(100 * MI)),
            ),
            (
                "burstable-partial-limits-with-init-containers",
                vec![
                    req_lim(("100m", "100m"), ("100m", "100Mi")),
                    req_lim(("100m", "100m"), ("", "")),
                ],
                vec![
                    req_lim(("100m", "100m"), ("100m", "100Mi")),
                    req_lim(("100m", "100m"), ("", "")),
                ],
                config(204, None, None),
            ),
        ];
        for (name, app, init, want) in cases {
            let all: Vec<Resources> = app.iter().chain(&init).copied().collect();
            let qos = qos_class(&all);
            let init: Vec<InitContainer> = init.into_iter().map(classic).collect();
            assert_eq!(pod_cgroup_config(&app, &init, qos), want, "{name}");
        }
    }

    #[test]
    fn pod_totals_take_the_largest_init_container() {
        // PodRequests: max(sum of app containers, largest init container).
        let app = [
            res(Some(100), None, Some(MI), None),
            res(Some(200), None, None, None),
        ];
        let init = [classic(res(Some(500), None, Some(MI / 2), None))];
        assert_eq!(
            pod_totals(&app, &init),
            res(Some(500), None, Some(MI), None)
        );
        assert_eq!(pod_totals(&app, &[]), res(Some(300), None, Some(MI), None));
    }

    fn classic(resources: Resources) -> InitContainer {
        InitContainer {
            resources,
            sidecar: false,
        }
    }

    fn sidecar(resources: Resources) -> InitContainer {
        InitContainer {
            resources,
            sidecar: true,
        }
    }

    /// kubelet's sidecar arithmetic (`AggregateContainerRequests` / `Limits`), worked by hand:
    /// sidecars add to the app containers' sum, and a classic init container needs its own
    /// value plus the sidecars started before it.
    #[test]
    fn pod_totals_count_sidecars_beside_the_app_containers() {
        let app = [res(Some(500), Some(500), Some(256 * MI), Some(256 * MI))];
        let side = res(Some(100), Some(100), Some(128 * MI), Some(128 * MI));
        // App 500m/256Mi + sidecar 100m/128Mi = 600m/384Mi.
        assert_eq!(
            pod_totals(&app, &[sidecar(side)]),
            res(Some(600), Some(600), Some(384 * MI), Some(384 * MI))
        );
        // A classic init container of 550m/300Mi after the sidecar needs 650m/428Mi while it
        // runs (550 + 100, 300 + 128), more than the 600m/384Mi after it.
        let big_init = res(Some(550), Some(550), Some(300 * MI), Some(300 * MI));
        assert_eq!(
            pod_totals(&app, &[sidecar(side), classic(big_init)]),
            res(Some(650), Some(650), Some(428 * MI), Some(428 * MI))
        );
        // The same init container before the sidecar runs alone: 550m/300Mi, below 600m/384Mi.
        assert_eq!(
            pod_totals(&app, &[classic(big_init), sidecar(side)]),
            res(Some(600), Some(600), Some(384 * MI), Some(384 * MI))
        );
        // The pod cgroup of the Guaranteed app + sidecar pod: quota 60000, 384Mi, 614 shares.
        let all = [app[0], side];
        let config = pod_cgroup_config(&app, &[sidecar(side)], qos_class(&all));
        assert_eq!(
            config,
            PodCgroupConfig {
                cpu_shares: 614,
                cpu_quota: Some(60_000),
                cpu_period: 100_000,
                memory_limit: Some(384 * MI),
            }
        );
    }

    fn pod(containers: &[(&str, Resources)]) -> Vec<(String, Resources)> {
        containers
            .iter()
            .map(|(n, r)| ((*n).to_owned(), *r))
            .collect()
    }

    fn node(cpu_milli: i64, memory: i64) -> Resources {
        res(Some(cpu_milli), None, Some(memory), None)
    }

    #[test]
    fn refuses_a_qos_change() {
        let old = pod(&[("app", req_lim(("100m", "100Mi"), ("100m", "100Mi")))]);
        let new = pod(&[("app", req_lim(("100m", "100Mi"), ("200m", "100Mi")))]);
        let refusal =
            check_resize(&old, &new, &[], &node(4000, 1 << 34), &[]).expect_err("qos change");
        assert_eq!(
            refusal,
            Refusal::QosChange {
                from: QosClass::Guaranteed,
                to: QosClass::Burstable
            }
        );
        assert_eq!(
            refusal.to_string(),
            "the resize would change the pod's QoS class from Guaranteed to Burstable, which cannot be done in place"
        );
        // Init containers count in the class: an init container without limits keeps the pod
        // Burstable, so app containers reaching requests == limits change nothing.
        let old = pod(&[("app", req_lim(("100m", "100Mi"), ("200m", "100Mi")))]);
        let new = pod(&[("app", req_lim(("200m", "100Mi"), ("200m", "100Mi")))]);
        let init = [classic(req_lim(("100m", ""), ("", "")))];
        assert!(check_resize(&old, &new, &init, &Resources::default(), &[]).is_ok());
        assert_eq!(
            check_resize(&old, &new, &[], &Resources::default(), &[]),
            Err(Refusal::QosChange {
                from: QosClass::Burstable,
                to: QosClass::Guaranteed
            })
        );
    }

    #[test]
    fn refuses_adding_or_removing_a_resource() {
        let old = pod(&[("app", req_lim(("100m", ""), ("", "")))]);
        let new = pod(&[("app", req_lim(("100m", ""), ("200m", "")))]);
        let refusal = check_resize(&old, &new, &[], &Resources::default(), &[]).expect_err("adds");
        assert_eq!(
            refusal,
            Refusal::AddsResource {
                container: "app".into(),
                resource: ResourceField::CpuLimit
            }
        );
        assert_eq!(
            refusal.to_string(),
            "container app has no limits.cpu: an in-place resize cannot add a resource the container was created without"
        );
        let old = pod(&[("app", req_lim(("100m", "64Mi"), ("", "")))]);
        let new = pod(&[("app", req_lim(("100m", ""), ("", "")))]);
        let refusal =
            check_resize(&old, &new, &[], &Resources::default(), &[]).expect_err("removes");
        assert_eq!(
            refusal,
            Refusal::RemovesResource {
                container: "app".into(),
                resource: ResourceField::MemoryRequest
            }
        );
        assert_eq!(
            refusal.to_string(),
            "container app has requests.memory set: an in-place resize cannot remove it"
        );
    }

    #[test]
    fn refuses_unknown_containers_and_requests_above_limits() {
        let old = pod(&[("app", req_lim(("100m", ""), ("", "")))]);
        let new = pod(&[("sidecar", req_lim(("100m", ""), ("", "")))]);
        let refusal =
            check_resize(&old, &new, &[], &Resources::default(), &[]).expect_err("unknown");
        assert_eq!(
            refusal.to_string(),
            "the pod has no container named sidecar"
        );

        let old = pod(&[("app", req_lim(("100m", "64Mi"), ("200m", "128Mi")))]);
        let new = pod(&[("app", req_lim(("100m", "256Mi"), ("200m", "128Mi")))]);
        let refusal =
            check_resize(&old, &new, &[], &Resources::default(), &[]).expect_err("above limit");
        assert_eq!(
            refusal.to_string(),
            "container app: memory request 256Mi is above its limit 128Mi"
        );
    }

    #[test]
    fn refuses_what_the_node_can_never_hold() {
        let old = pod(&[
            ("a", req_lim(("1", "1Gi"), ("", ""))),
            ("b", req_lim(("500m", "1Gi"), ("", ""))),
        ]);
        let new = pod(&[
            ("a", req_lim(("2", "1Gi"), ("", ""))),
            ("b", req_lim(("500m", "1Gi"), ("", ""))),
        ]);
        let refusal = check_resize(&old, &new, &[], &node(2000, 8 << 30), &[]).expect_err("cpu");
        assert_eq!(
            refusal,
            Refusal::ExceedsAllocatable {
                resource: ResourceName::Cpu,
                requested: "2500m".into(),
                allocatable: "2".into()
            }
        );
        assert_eq!(
            refusal.to_string(),
            "Infeasible: the pod would request 2500m cpu but the node has only 2 allocatable"
        );
        let refusal = check_resize(&old, &old, &[], &node(4000, 1 << 30), &[]).expect_err("memory");
        assert_eq!(
            refusal.to_string(),
            "Infeasible: the pod would request 2Gi memory but the node has only 1Gi allocatable"
        );
        // Exactly full fits; unknown allocatable is not checked.
        assert!(check_resize(&old, &new, &[], &node(2500, 2 << 30), &[]).is_ok());
        assert!(check_resize(&old, &new, &[], &Resources::default(), &[]).is_ok());
    }

    #[test]
    fn fits_counts_every_other_pod() {
        let others = [
            res(Some(1000), None, Some(1 << 30), None),
            res(Some(500), None, None, None),
        ];
        let this = res(Some(500), None, Some(1 << 30), None);
        assert!(fits_node(&others, &this, &node(2000, 2 << 30)));
        assert!(!fits_node(&others, &this, &node(1999, 2 << 30)));
        assert!(!fits_node(&others, &this, &node(2000, (2 << 30) - 1)));
        assert!(fits_node(&others, &this, &Resources::default()));
    }

    fn limit_range(kind: &str, min: Value, max: Value, ratio: Value) -> Value {
        json!({
            "metadata": {"name": "abc", "namespace": "test"},
            "spec": {"limits": [{"type": kind, "min": min, "max": max, "maxLimitRequestRatio": ratio}]}
        })
    }

    /// Resizes `containers` identical containers to `r` (from `r` + 1 in every value it sets,
    /// so the set of values and the QoS class stay) under the LimitRange `lr`.
    fn resize_to(r: Resources, containers: usize, lr: &Value) -> Result<(), Refusal> {
        let bump = |v: Option<i64>| v.map(|x| x + 1);
        let before = res(
            bump(r.cpu_request),
            bump(r.cpu_limit),
            bump(r.memory_request),
            bump(r.memory_limit),
        );
        assert_ne!(before, r, "the test resize must change something");
        let named = |r: Resources| -> Vec<(String, Resources)> {
            (0..containers).map(|i| (format!("foo-{i}"), r)).collect()
        };
        check_resize(
            &named(before),
            &named(r),
            &[],
            &Resources::default(),
            std::slice::from_ref(lr),
        )
    }

    /// admission_test.go `TestPodLimitFunc` success cases (cpu/memory ones).
    #[test]
    fn limit_range_accepts_like_limitranger() {
        let e = || json!({});
        let cases = [
            (
                "ctr-min-cpu-request",
                req_lim(("100m", ""), ("", "")),
                1,
                limit_range("Container", json!({"cpu": "50m"}), e(), e()),
            ),
            (
                "ctr-min-cpu-request-limit",
                req_lim(("100m", ""), ("200m", "")),
                1,
                limit_range("Container", json!({"cpu": "50m"}), e(), e()),
            ),
            (
                "ctr-min-memory-request",
                req_lim(("", "60Mi"), ("", "")),
                1,
                limit_range("Container", json!({"memory": "50Mi"}), e(), e()),
            ),
            (
                "ctr-max-cpu-request-limit",
                req_lim(("500m", ""), ("1", "")),
                1,
                limit_range("Container", e(), json!({"cpu": "2"}), e()),
            ),
            (
                "ctr-max-mem-request-limit",
                req_lim(("", "250Mi"), ("", "500Mi")),
                1,
                limit_range("Container", e(), json!({"memory": "1Gi"}), e()),
            ),
            (
                "ctr-max-cpu-ratio",
                req_lim(("500m", ""), ("750m", "")),
                1,
                limit_range("Container", e(), e(), json!({"cpu": "1.5"})),
            ),
            (
                "pod-min-cpu-request",
                req_lim(("75m", ""), ("", "")),
                2,
                limit_range("Pod", json!({"cpu": "100m"}), e(), e()),
            ),
            (
                "pod-max-cpu-request-limit",
                req_lim(("500m", ""), ("1", "")),
                2,
                limit_range("Pod", e(), json!({"cpu": "2"}), e()),
            ),
            (
                "pod-max-mem-request-limit",
                req_lim(("", "250Mi"), ("", "500Mi")),
                2,
                limit_range("Pod", e(), json!({"memory": "1Gi"}), e()),
            ),
            (
                "pod-max-mem-ratio",
                req_lim(("", "300Mi"), ("", "450Mi")),
                3,
                limit_range(
                    "Pod",
                    e(),
                    json!({"memory": "2Gi"}),
                    json!({"memory": "1.5"}),
                ),
            ),
        ];
        for (name, r, n, lr) in cases {
            assert_eq!(resize_to(r, n, &lr), Ok(()), "{name}");
        }
    }

    /// admission_test.go `TestPodLimitFunc` error cases, with LimitRanger's messages.
    #[test]
    fn limit_range_refuses_like_limitranger() {
        let e = || json!({});
        let cases = [
            (
                req_lim(("40m", ""), ("", "")),
                1,
                limit_range("Container", json!({"cpu": "50m"}), e(), e()),
                "minimum cpu usage per Container is 50m, but request is 40m",
            ),
            (
                req_lim(("", "10Mi"), ("", "")),
                1,
                limit_range("Container", json!({"cpu": "50m"}), e(), e()),
                "minimum cpu usage per Container is 50m.  No request is specified",
            ),
            (
                req_lim(("", "40Mi"), ("", "100Mi")),
                1,
                limit_range("Container", json!({"memory": "50Mi"}), e(), e()),
                "minimum memory usage per Container is 50Mi, but request is 40Mi",
            ),
            (
                req_lim(("500m", ""), ("2500m", "")),
                1,
                limit_range("Container", e(), json!({"cpu": "2"}), e()),
                "maximum cpu usage per Container is 2, but limit is 2500m",
            ),
            (
                req_lim(("", "10Mi"), ("", "")),
                1,
                limit_range("Container", e(), json!({"cpu": "2"}), e()),
                "maximum cpu usage per Container is 2.  No limit is specified",
            ),
            (
                req_lim(("1250m", ""), ("2500m", "")),
                1,
                limit_range("Container", e(), e(), json!({"cpu": "1"})),
                "cpu max limit to request ratio per Container is 1, but provided ratio is 2.000000",
            ),
            (
                req_lim(("", "250Mi"), ("", "2Gi")),
                1,
                limit_range("Container", e(), json!({"memory": "1Gi"}), e()),
                "maximum memory usage per Container is 1Gi, but limit is 2Gi",
            ),
            (
                req_lim(("75m", ""), ("", "")),
                1,
                limit_range("Pod", json!({"cpu": "100m"}), e(), e()),
                "minimum cpu usage per Pod is 100m, but request is 75m",
            ),
            (
                req_lim(("", "600Mi"), ("", "600Mi")),
                2,
                limit_range("Pod", e(), json!({"memory": "1Gi"}), e()),
                "maximum memory usage per Pod is 1Gi, but limit is 1200Mi",
            ),
        ];
        for (r, n, lr, message) in cases {
            assert_eq!(
                resize_to(r, n, &lr),
                Err(Refusal::LimitRange {
                    name: "abc".into(),
                    message: message.into()
                }),
                "{message}"
            );
        }
        // Several violations are aggregated, as Go's utilerrors prints them.
        let lr = limit_range(
            "Container",
            json!({"cpu": "50m"}),
            json!({"memory": "1Gi"}),
            e(),
        );
        let refusal = resize_to(req_lim(("40m", "2Gi"), ("", "4Gi")), 1, &lr).expect_err("two");
        assert_eq!(
            refusal.to_string(),
            "LimitRange abc: [minimum cpu usage per Container is 50m, but request is 40m, maximum memory usage per Container is 1Gi, but limit is 4Gi]"
        );
    }

    #[test]
    fn limit_ranges_apply_to_changed_containers_only() {
        let lr = limit_range("Container", json!({"cpu": "50m"}), json!({}), json!({}));
        let old = pod(&[
            ("small", req_lim(("10m", ""), ("", ""))),
            ("app", req_lim(("100m", ""), ("", ""))),
        ]);
        let new = pod(&[
            ("small", req_lim(("10m", ""), ("", ""))),
            ("app", req_lim(("200m", ""), ("", ""))),
        ]);
        assert!(
            check_resize(
                &old,
                &new,
                &[],
                &Resources::default(),
                std::slice::from_ref(&lr)
            )
            .is_ok()
        );
        // A malformed LimitRange is reported rather than ignored.
        let bad = limit_range("Container", json!({"cpu": "lots"}), json!({}), json!({}));
        let refusal =
            check_resize(&old, &new, &[], &Resources::default(), &[bad]).expect_err("bad");
        assert!(
            refusal
                .to_string()
                .starts_with("LimitRange abc: spec.limits[0].min.cpu: invalid quantity \"lots\""),
            "{refusal}"
        );
    }
}
