//! Pod spec → CRI configuration, as kubelet's kuberuntime builds it (labels, annotations,
//! resources, env), and the container hash of the configured release.

use std::collections::{BTreeMap, HashMap};

use inplaced::cri::labels;
use inplaced::cri::proto::*;
use inplaced::hashing::{HashOptions, KubeletVersion, format_hash, hash_container};
use serde_json::Value;

/// The pod's QoS class (pkg/apis/core/v1/helper/qos), which decides the cgroup directory and
/// oom_score_adj.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "Guaranteed",
            Qos::Burstable => "Burstable",
            Qos::BestEffort => "BestEffort",
        }
    }

    /// The directory below `kubepods`; Guaranteed pods sit directly in it.
    fn dir(self) -> &'static str {
        match self {
            Qos::Guaranteed => "",
            Qos::Burstable => "/burstable",
            Qos::BestEffort => "/besteffort",
        }
    }
}

pub fn pod_cgroup_parent(root: &str, qos: Qos, uid: &str) -> String {
    format!("/{}/kubepods{}/pod{uid}", root.trim_matches('/'), qos.dir())
}

/// The pod's slice as kubelet's systemd cgroup driver names it for the sandbox's CRI
/// `cgroup_parent` (cgroup root `/`): the cgroup name `kubepods[/qos]/pod<uid>`, each part's `-`
/// escaped to `_`, joined with `-` and expanded as systemd nests slices, e.g.
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
pub fn pod_slice_parent(qos: Qos, uid: &str) -> String {
    let pod = format!("pod{}", uid.replace('-', "_"));
    let parts: Vec<&str> = std::iter::once("kubepods")
        .chain(qos.dir().strip_prefix('/'))
        .chain(std::iter::once(pod.as_str()))
        .collect();
    (1..=parts.len())
        .map(|n| format!("/{}.slice", parts[..n].join("-")))
        .collect()
}

/// A resource.Quantity in base units (cores, bytes), or None when unparsable.
/// Precision of f64 is plenty for the values pods use.
pub fn parse_quantity(text: &str) -> Option<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let mut value: f64 = num.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    value *= scale;
    value.is_finite().then_some(value)
}

/// Milli-units, rounded up like `Quantity.MilliValue`.
pub fn milli(q: &str) -> Option<i64> {
    parse_quantity(q).map(|v| (v * 1000.0 - 1e-9).ceil() as i64)
}

/// Whole units (bytes), rounded up like `Quantity.Value`.
pub fn bytes(q: &str) -> Option<i64> {
    parse_quantity(q).map(|v| (v - 1e-9).ceil() as i64)
}

/// `resources.<kind>.<name>` of a container as text (`kind`: requests or limits).
pub fn resource(c: &Value, kind: &str, name: &str) -> Option<String> {
    c.pointer(&format!("/resources/{kind}/{name}"))
        .and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

/// Request, defaulting to the limit (as API defaulting does for containers with a limit only).
pub fn request(c: &Value, name: &str) -> Option<String> {
    resource(c, "requests", name).or_else(|| resource(c, "limits", name))
}

pub fn containers(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn qos_class(pod: &Value) -> Qos {
    let all: Vec<Value> = containers(pod, "containers")
        .into_iter()
        .chain(containers(pod, "initContainers"))
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        for name in ["cpu", "memory"] {
            let limit = resource(c, "limits", name);
            let req = request(c, name);
            if limit.is_some() || req.is_some() {
                any = true;
            }
            match (&limit, &req) {
                (Some(l), Some(r)) if parse_quantity(l) == parse_quantity(r) => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        Qos::BestEffort
    } else if guaranteed {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// MilliCPUToShares: 0 → 2 (the minimum), else milli*1024/1000 clamped to [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return 2;
    }
    (milli * 1024 / 1000).clamp(2, 262_144)
}

pub const CPU_PERIOD: i64 = 100_000;

/// MilliCPUToQuota: 0 when no limit, else at least 1000.
pub fn milli_cpu_to_quota(milli: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli * CPU_PERIOD / 1000).max(1000)
}

/// LinuxContainerResources from v1 resources (kuberuntime_container_linux.go).
pub fn linux_resources(c: &Value, qos: Qos, node_memory: i64) -> LinuxContainerResources {
    let cpu_request = request(c, "cpu").and_then(|q| milli(&q)).unwrap_or(0);
    let cpu_limit = resource(c, "limits", "cpu")
        .and_then(|q| milli(&q))
        .unwrap_or(0);
    let mem_limit = resource(c, "limits", "memory")
        .and_then(|q| bytes(&q))
        .unwrap_or(0);
    let mem_request = request(c, "memory").and_then(|q| bytes(&q)).unwrap_or(0);
    // Since 1.26 (kubernetes PR 108832) only an absent request falls back to the limit
    // (`request` above); an explicit zero gives the minimum shares. Every release the stand-in
    // plays is later.
    let shares_from = cpu_request;
    let oom_score_adj = match qos {
        Qos::Guaranteed => -997,
        Qos::BestEffort => 1000,
        Qos::Burstable => {
            let adj = 1000 - (1000 * i128::from(mem_request) / i128::from(node_memory.max(1)));
            let adj = adj.max(3) as i64;
            if adj == 1000 { 999 } else { adj }
        }
    };
    LinuxContainerResources {
        cpu_period: CPU_PERIOD,
        cpu_quota: milli_cpu_to_quota(cpu_limit),
        cpu_shares: milli_cpu_to_shares(shares_from),
        memory_limit_in_bytes: mem_limit,
        oom_score_adj,
        ..Default::default()
    }
}

/// What the pod cgroup gets: shares from the pod's requests, quota and memory limit from its
/// limits only when every container, init ones included, has that limit
/// (pkg/kubelet/cm/helpers_linux.go). The pod's value of a resource is kubelet's aggregate:
/// the app containers and sidecars summed, or what a classic init container needs while it
/// runs (its own value and the sidecars started before it) where that is more.
pub struct PodCgroupLimits {
    pub cpu_shares: i64,
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<i64>,
}

pub fn pod_cgroup_limits(pod: &Value) -> PodCgroupLimits {
    let app = containers(pod, "containers");
    let init = containers(pod, "initContainers");
    let aggregate = |value: &dyn Fn(&Value) -> i64| {
        let mut sum: i64 = app.iter().map(value).sum();
        let (mut sidecars, mut while_init) = (0, 0);
        for c in &init {
            let running = if c["restartPolicy"] == "Always" {
                sum += value(c);
                sidecars += value(c);
                sidecars
            } else {
                value(c) + sidecars
            };
            while_init = while_init.max(running);
        }
        sum.max(while_init)
    };
    let every_has = |name: &str| {
        !app.is_empty()
            && app
                .iter()
                .chain(&init)
                .all(|c| resource(c, "limits", name).is_some())
    };
    let cpu_req = aggregate(&|c| request(c, "cpu").and_then(|q| milli(&q)).unwrap_or(0));
    let cpu_lim = aggregate(&|c| {
        resource(c, "limits", "cpu")
            .and_then(|q| milli(&q))
            .unwrap_or(0)
    });
    let mem_lim = aggregate(&|c| {
        resource(c, "limits", "memory")
            .and_then(|q| bytes(&q))
            .unwrap_or(0)
    });
    PodCgroupLimits {
        cpu_shares: milli_cpu_to_shares(cpu_req),
        cpu_quota: every_has("cpu").then(|| milli_cpu_to_quota(cpu_lim)),
        memory_limit: (every_has("memory") && mem_lim > 0).then_some(mem_lim),
    }
}

/// The hashes the configured kubelet release writes for this container JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecHashes {
    pub hash: u64,
    pub without_resources: Option<u64>,
}

/// Where the golden files hold this very container (every pod the end-to-end tests start from),
/// the hashes are the ones the real kubelet of the release stored, made by its Go code: the agent
/// under test never meets hashes computed by its own code there. Other containers (a spec a test
/// changed) are hashed with inplaced's hashing, itself checked against every golden line.
pub fn spec_hashes(
    container: &Value,
    version: &KubeletVersion,
    resize_gate: bool,
) -> Result<SpecHashes, String> {
    if let Some(stored) = crate::golden::stored_by_kubelet(version.minor(), container) {
        return Ok(SpecHashes {
            hash: stored.hash,
            without_resources: stored.without_resources.filter(|_| resize_gate),
        });
    }
    // The container exactly as the API server returned it: kubelet decodes that JSON.
    let bytes = serde_json::to_vec(container).map_err(|e| e.to_string())?;
    let h = hash_container(&bytes, version, &HashOptions::default()).map_err(|e| e.to_string())?;
    Ok(SpecHashes {
        hash: h.hash,
        without_resources: h.hash_without_resources.filter(|_| resize_gate),
    })
}

/// A field of the pod a `fieldRef` may name, or None when unsupported.
fn field_ref(pod: &Value, path: &str, pod_ip: &str) -> Option<String> {
    let meta = |k: &str| {
        pod.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
    };
    let keyed = |map: &str, rest: &str| {
        let key = rest.strip_prefix("['")?.strip_suffix("']")?;
        Some(
            pod.pointer(&format!("/metadata/{map}"))
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        )
    };
    match path {
        "metadata.name" => meta("name").map(str::to_owned),
        "metadata.namespace" => meta("namespace").map(str::to_owned),
        "metadata.uid" => meta("uid").map(str::to_owned),
        "spec.nodeName" => pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        "spec.serviceAccountName" => Some(
            pod.pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        ),
        "status.podIP" | "status.hostIP" | "status.podIPs" | "status.hostIPs" => {
            Some(pod_ip.to_owned())
        }
        p => {
            if let Some(rest) = p.strip_prefix("metadata.labels") {
                keyed("labels", rest)
            } else if let Some(rest) = p.strip_prefix("metadata.annotations") {
                keyed("annotations", rest)
            } else {
                None
            }
        }
    }
}

/// `$(VAR)` expansion as kubelet does for env values, command and args: defined names are
/// replaced, `$$` is a literal `$`, anything else stays as written.
pub fn expand(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(v) = vars.get(&inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment, resolved against the pod as it is now (kubelet resolves
/// fieldRefs when it creates the container). Sources this sandbox has no data for
/// (configMap, secret, resourceFieldRef) are left out.
pub fn env(pod: &Value, c: &Value, pod_ip: &str) -> Vec<KeyValue> {
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = e.get("name").and_then(Value::as_str) else {
            continue;
        };
        let value = if let Some(path) = e
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
        {
            match field_ref(pod, path, pod_ip) {
                Some(v) => v,
                None => continue,
            }
        } else if e.get("valueFrom").is_some() {
            continue;
        } else {
            expand(e.get("value").and_then(Value::as_str).unwrap_or(""), &vars)
        };
        if !vars.contains_key(name) {
            order.push(name.to_owned());
        }
        vars.insert(name.to_owned(), value);
    }
    order
        .into_iter()
        .map(|k| KeyValue {
            value: vars.get(&k).cloned().unwrap_or_default(),
            key: k,
        })
        .collect()
}

fn strings(c: &Value, field: &str) -> Vec<String> {
    c.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or("").to_owned())
        .collect()
}

pub fn str_field<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// Identity of the pod the CRI objects belong to.
pub struct PodIds<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
}

pub fn sandbox_config(pod: &Value, ids: &PodIds<'_>, cgroup_parent: &str) -> PodSandboxConfig {
    let mut sandbox_labels: HashMap<String, String> = string_map(pod.pointer("/metadata/labels"));
    sandbox_labels.insert(labels::POD_NAME.into(), ids.name.into());
    sandbox_labels.insert(labels::POD_NAMESPACE.into(), ids.namespace.into());
    sandbox_labels.insert(labels::POD_UID.into(), ids.uid.into());
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: ids.name.into(),
            uid: ids.uid.into(),
            namespace: ids.namespace.into(),
            attempt: 0,
        }),
        // Host network: kubelet leaves the hostname empty.
        hostname: String::new(),
        labels: sandbox_labels,
        annotations: string_map(pod.pointer("/metadata/annotations")),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent.into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        // Own PID namespace per container: the process is PID 1, as under a real kubelet.
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

pub fn string_map(v: Option<&Value>) -> HashMap<String, String> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
        .collect()
}

/// Everything CreateContainer needs besides the spec container itself.
pub struct ContainerInputs<'a> {
    pub pod: &'a Value,
    pub ids: PodIds<'a>,
    pub hashes: SpecHashes,
    pub restart_count: u32,
    pub qos: Qos,
    pub node_memory: i64,
    pub pod_ip: &'a str,
}

pub fn container_config(c: &Value, input: &ContainerInputs<'_>) -> ContainerConfig {
    let name = str_field(c, "name");
    let container_labels = HashMap::from([
        (labels::POD_NAME.to_owned(), input.ids.name.to_owned()),
        (
            labels::POD_NAMESPACE.to_owned(),
            input.ids.namespace.to_owned(),
        ),
        (labels::POD_UID.to_owned(), input.ids.uid.to_owned()),
        (labels::CONTAINER_NAME.to_owned(), name.to_owned()),
    ]);
    let mut ann = HashMap::from([
        (
            labels::CONTAINER_HASH.to_owned(),
            format_hash(input.hashes.hash),
        ),
        (
            labels::CONTAINER_RESTART_COUNT.to_owned(),
            input.restart_count.to_string(),
        ),
        (
            labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_owned(),
            // What API defaulting would have given a kubelet when the double stored none.
            Some(str_field(c, "terminationMessagePath"))
                .filter(|s| !s.is_empty())
                .unwrap_or("/dev/termination-log")
                .to_owned(),
        ),
        (
            labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_owned(),
            Some(str_field(c, "terminationMessagePolicy"))
                .filter(|s| !s.is_empty())
                .unwrap_or("File")
                .to_owned(),
        ),
    ]);
    if let Some(h) = input.hashes.without_resources {
        ann.insert(
            labels::CONTAINER_HASH_WITHOUT_RESOURCES.into(),
            format_hash(h),
        );
    }
    if let Some(g) = input
        .pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        ann.insert(labels::POD_DELETION_GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(g) = input
        .pod
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        ann.insert(labels::POD_TERMINATION_GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(pre_stop) = c.pointer("/lifecycle/preStop") {
        ann.insert(
            labels::CONTAINER_PRESTOP_HANDLER.into(),
            pre_stop.to_string(),
        );
    }
    if let Some(ports) = c
        .get("ports")
        .filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))
    {
        ann.insert(labels::CONTAINER_PORTS.into(), ports.to_string());
    }
    let envs = env(input.pod, c, input.pod_ip);
    let vars: HashMap<String, String> = envs
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    let expand_all = |v: Vec<String>| v.iter().map(|s| expand(s, &vars)).collect::<Vec<_>>();
    let run_as_user = c
        .pointer("/securityContext/runAsUser")
        .and_then(Value::as_i64)
        .map(|value| Int64Value { value });
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            // kubelet uses the restart count as the attempt number.
            attempt: input.restart_count,
        }),
        image: Some(ImageSpec {
            image: str_field(c, "image").into(),
            ..Default::default()
        }),
        command: expand_all(strings(c, "command")),
        args: expand_all(strings(c, "args")),
        working_dir: str_field(c, "workingDir").into(),
        envs,
        labels: container_labels,
        annotations: ann,
        stdin: c.get("stdin").and_then(Value::as_bool).unwrap_or(false),
        stdin_once: c.get("stdinOnce").and_then(Value::as_bool).unwrap_or(false),
        tty: c.get("tty").and_then(Value::as_bool).unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(linux_resources(c, input.qos, input.node_memory)),
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespaces()),
                run_as_user,
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// Sorted map for deterministic JSON in tests and status.
pub fn sorted(map: &HashMap<String, String>) -> BTreeMap<&str, &str> {
    map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        assert_eq!(milli("100m"), Some(100));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(bytes("128Mi"), Some(128 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(parse_quantity("abc"), None);
    }

    #[test]
    fn resources_follow_kubelet() {
        let c = json!({"resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                     "limits": {"cpu": "500m", "memory": "256Mi"}}});
        let r = linux_resources(&c, Qos::Burstable, 1 << 30);
        assert_eq!(r.cpu_shares, 102);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 256 << 20);
        assert_eq!(r.oom_score_adj, 1000 - 125);
        let none = linux_resources(&json!({}), Qos::BestEffort, 1 << 30);
        assert_eq!(
            (none.cpu_shares, none.cpu_quota, none.oom_score_adj),
            (2, 0, 1000)
        );
        assert_eq!(milli_cpu_to_quota(5), 1000);
        // An explicit zero request: the minimum shares (1.26+); an absent one: the limit's.
        let zero = json!({"resources": {"requests": {"cpu": "0"}, "limits": {"cpu": "1"}}});
        assert_eq!(
            linux_resources(&zero, Qos::Burstable, 1 << 30).cpu_shares,
            2
        );
        let absent = json!({"resources": {"limits": {"cpu": "1"}}});
        assert_eq!(
            linux_resources(&absent, Qos::Burstable, 1 << 30).cpu_shares,
            1024
        );
    }

    #[test]
    fn qos_classes() {
        let pod = |c: Value| json!({"spec": {"containers": [c]}});
        assert_eq!(qos_class(&pod(json!({"name": "a"}))), Qos::BestEffort);
        let g = json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}});
        assert_eq!(qos_class(&pod(g)), Qos::Guaranteed);
        let b = json!({"resources": {"requests": {"cpu": "1"}}});
        assert_eq!(qos_class(&pod(b)), Qos::Burstable);
        assert_eq!(
            pod_cgroup_parent("inplaced-test", Qos::Guaranteed, "u"),
            "/inplaced-test/kubepods/podu"
        );
        assert_eq!(
            pod_cgroup_parent("x", Qos::BestEffort, "u"),
            "/x/kubepods/besteffort/podu"
        );
        assert_eq!(
            pod_slice_parent(Qos::Burstable, "12-ab"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice"
        );
        assert_eq!(
            pod_slice_parent(Qos::Guaranteed, "u"),
            "/kubepods.slice/kubepods-podu.slice"
        );
    }

    #[test]
    fn env_resolves_field_refs_and_expands() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                                       "labels": {"app": "web"}, "annotations": {"v": "1"}}});
        let c = json!({"env": [
            {"name": "A", "value": "x"},
            {"name": "B", "value": "$(A)-$(NOPE)-$$(A)"},
            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['v']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
        ]});
        let got: Vec<(String, String)> = env(&pod, &c, "127.0.0.1")
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect();
        let want = [
            ("A", "x"),
            ("B", "x-$(NOPE)-$(A)"),
            ("L", "web"),
            ("V", "1"),
            ("IP", "127.0.0.1"),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        );
    }
}
