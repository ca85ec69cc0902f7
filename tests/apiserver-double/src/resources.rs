//! The resources the double serves, described as data so routing, discovery and the
//! per-resource rules read the same table.

use serde_json::{Value, json};

/// Which lists a strategic merge patch merges by key (the rest are replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmpSchema {
    /// Custom resources: strategic merge patch is rejected with 415, like the real server.
    Unsupported,
    Pod,
    Node,
    Event,
}

/// Which API changes a pod's container resources in place, by cluster release
/// (KEP 1287; `docs/kubelet-resize.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodResizeApi {
    /// 1.36+: the `pods/resize` subresource; the kubelet reports progress in the
    /// `PodResizePending`/`PodResizeInProgress` conditions, the server sets no `status.resize`;
    /// its PodResizeValidator admission (kubernetes PR 136043) refuses a resize beyond the
    /// node's allocatable (403) instead of the kubelet's Infeasible.
    #[default]
    Subresource,
    /// 1.34 and 1.35: as `Subresource`, but a resize beyond the node is admitted and the
    /// kubelet answers Infeasible.
    SubresourceAdmittingAnySize,
    /// 1.33: as `Subresource`, but validation refuses to decrease a memory limit unless the
    /// container's memory `resizePolicy` is `RestartContainer` (lifted in 1.34).
    SubresourceKeepingMemoryLimits,
    /// 1.32: the `pods/resize` subresource, and the server marks `status.resize: Proposed`
    /// when a resize changes a container's resources.
    SubresourceWithResizeStatus,
    /// 1.27–1.31 with the InPlacePodVerticalScaling gate: no `pods/resize` (404), but an update
    /// or patch of the pod may change containers' cpu/memory under the same validation, and
    /// the server marks `status.resize: Proposed`.
    SpecUpdate,
    /// Before 1.27, or the gate off: container resources are immutable, and a status write
    /// loses the containers' `resources` and `allocatedResources` unless the pod's spec has a
    /// `resizePolicy` (what a kubelet reports of a resize does not reach the API).
    Off,
}

impl PodResizeApi {
    /// What a cluster of release 1.`minor` serves; `gate` is InPlacePodVerticalScaling
    /// (off by default before 1.33, on by default from 1.33).
    pub fn for_release(minor: u32, gate: bool) -> Self {
        match minor {
            _ if !gate || minor < 27 => PodResizeApi::Off,
            27..=31 => PodResizeApi::SpecUpdate,
            32 => PodResizeApi::SubresourceWithResizeStatus,
            33 => PodResizeApi::SubresourceKeepingMemoryLimits,
            34 | 35 => PodResizeApi::SubresourceAdmittingAnySize,
            _ => PodResizeApi::Subresource,
        }
    }

    pub fn has_subresource(self) -> bool {
        matches!(
            self,
            PodResizeApi::Subresource
                | PodResizeApi::SubresourceAdmittingAnySize
                | PodResizeApi::SubresourceKeepingMemoryLimits
                | PodResizeApi::SubresourceWithResizeStatus
        )
    }

    /// A memory limit may decrease only with the container's memory `resizePolicy`
    /// `RestartContainer` (1.33).
    pub fn keeps_memory_limits(self) -> bool {
        self == PodResizeApi::SubresourceKeepingMemoryLimits
    }

    /// An update of the pod itself may change container resources.
    pub fn update_may_resize(self) -> bool {
        self == PodResizeApi::SpecUpdate
    }

    /// The server sets `status.resize: Proposed` on a resize (until 1.32).
    pub fn marks_proposed(self) -> bool {
        matches!(
            self,
            PodResizeApi::SpecUpdate | PodResizeApi::SubresourceWithResizeStatus
        )
    }
}

/// One served resource.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    /// API group; `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Has a `/status` subresource (status ignored on the main resource).
    pub status_subresource: bool,
    /// How a pod's container resources may change (`Off` for everything but pods).
    pub pod_resize: PodResizeApi,
    /// `metadata.generation` is kept and bumped on spec changes.
    pub generation: bool,
    /// An update without `metadata.resourceVersion` is accepted (unconditional).
    pub allow_unconditional_update: bool,
    /// Field selectors accepted besides `metadata.name`/`metadata.namespace`.
    pub field_selectors: Vec<String>,
    pub smp: SmpSchema,
    /// Custom resource: the status subresource keeps everything but `status`.
    pub custom: bool,
}

impl ResourceDef {
    /// A namespaced custom resource with a status subresource, as a CRD would declare it.
    pub fn custom(group: &str, version: &str, kind: &str, plural: &str) -> Self {
        ResourceDef {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced: true,
            short_names: vec![],
            status_subresource: true,
            pod_resize: PodResizeApi::Off,
            generation: true,
            allow_unconditional_update: false,
            field_selectors: vec![],
            smp: SmpSchema::Unsupported,
            custom: true,
        }
    }

    fn core(kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceDef {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: vec![],
            status_subresource: false,
            pod_resize: PodResizeApi::Off,
            generation: false,
            allow_unconditional_update: true,
            field_selectors: vec![],
            smp: SmpSchema::Event,
            custom: false,
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `containerresizerequests.inplaced.io`: the name used in error messages
    /// and in the store's direct API.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn details(&self, name: &str) -> Value {
        let mut d = json!({ "name": name, "kind": self.plural });
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        match sub {
            "status" => self.status_subresource,
            "resize" => self.pod_resize.has_subresource(),
            _ => false,
        }
    }

    /// The CustomResourceDefinition that makes the API server serve this custom resource:
    /// named `plural.group`, the one version served and stored, a status subresource where it
    /// has one, and a schema that keeps every field (the double validates no schema).
    pub fn crd_object(&self) -> Value {
        let mut names = json!({
            "kind": self.kind,
            "listKind": format!("{}List", self.kind),
            "plural": self.plural,
            "singular": self.singular,
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        let mut version = json!({
            "name": self.version,
            "served": true,
            "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        });
        if self.status_subresource {
            version["subresources"] = json!({"status": {}});
        }
        json!({
            "apiVersion": format!("{CRD_GROUP}/v1"),
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.qualified()},
            "spec": {
                "group": self.group,
                "names": names,
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [version],
            },
        })
    }

    /// This is the CustomResourceDefinition resource itself.
    pub fn is_crd(&self) -> bool {
        self.group == CRD_GROUP && self.plural == "customresourcedefinitions"
    }

    pub fn subresources(&self) -> Vec<&'static str> {
        let mut v = vec![];
        if self.status_subresource {
            v.push("status");
        }
        if self.pod_resize.has_subresource() {
            v.push("resize");
        }
        v
    }
}

/// The group of CustomResourceDefinitions.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";

/// The qualified name (`store()` and error messages) of CustomResourceDefinitions.
pub const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// The group of admission policies and their bindings.
pub const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";

/// The qualified name (`store()` and error messages) of ValidatingAdmissionPolicies.
pub const VALIDATING_ADMISSION_POLICIES: &str =
    "validatingadmissionpolicies.admissionregistration.k8s.io";

/// The qualified name of ValidatingAdmissionPolicyBindings.
pub const VALIDATING_ADMISSION_POLICY_BINDINGS: &str =
    "validatingadmissionpolicybindings.admissionregistration.k8s.io";

/// The built-in set: what inplaced and its tests touch, with the newest resize API.
pub fn default_resources() -> Vec<ResourceDef> {
    resources_with(PodResizeApi::default())
}

/// The built-in set, pods resizable through `pod_resize`.
pub fn resources_with(pod_resize: PodResizeApi) -> Vec<ResourceDef> {
    let mut pods = ResourceDef::core("Pod", "pods", true);
    pods.short_names = vec!["po".into()];
    pods.status_subresource = true;
    pods.pod_resize = pod_resize;
    // Pod generation tracking is on by default from 1.34.
    pods.generation = true;
    pods.field_selectors = [
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ]
    .map(String::from)
    .to_vec();
    pods.smp = SmpSchema::Pod;

    let mut nodes = ResourceDef::core("Node", "nodes", false);
    nodes.short_names = vec!["no".into()];
    nodes.status_subresource = true;
    nodes.field_selectors = vec!["spec.unschedulable".into()];
    nodes.smp = SmpSchema::Node;

    let mut events = ResourceDef::core("Event", "events", true);
    events.short_names = vec!["ev".into()];
    events.field_selectors = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]
    .map(String::from)
    .to_vec();

    let mut new_events = ResourceDef::core("Event", "events", true);
    new_events.group = "events.k8s.io".into();
    new_events.short_names = vec!["ev".into()];

    let mut limit_ranges = ResourceDef::core("LimitRange", "limitranges", true);
    limit_ranges.short_names = vec!["limits".into()];

    let mut namespaces = ResourceDef::core("Namespace", "namespaces", false);
    namespaces.short_names = vec!["ns".into()];
    namespaces.status_subresource = true;

    let mut crr = ResourceDef::custom(
        "apps.kruise.io",
        "v1alpha1",
        "ContainerRecreateRequest",
        "containerrecreaterequests",
    );
    crr.short_names = vec!["crr".into()];

    let resize = ResourceDef::custom(
        "inplaced.io",
        "v1alpha1",
        "ContainerResizeRequest",
        "containerresizerequests",
    );

    let restart = ResourceDef::custom(
        "inplaced.io",
        "v1alpha1",
        "ContainerRestartRequest",
        "containerrestartrequests",
    );

    // Restarted pod by pod by the agents together; they write only its status.
    let mut rollouts = ResourceDef::custom(
        "inplaced.io",
        "v1alpha1",
        "ContainerRestartRollout",
        "containerrestartrollouts",
    );
    rollouts.short_names = vec!["ctro".into()];

    // coordination.k8s.io/v1: the agents' Leases (how they see each other alive).
    let mut leases = ResourceDef::core("Lease", "leases", true);
    leases.group = "coordination.k8s.io".into();

    // One per node, named after it: what a kubelet upgrade would do there (cluster-scoped, no
    // status subresource: the agent writes the whole object, and every change of its status
    // bumps the generation, as kube-apiserver does for such a custom resource).
    let mut upgrade_checks = ResourceDef::custom(
        "inplaced.io",
        "v1alpha1",
        "NodeUpgradeCheck",
        "nodeupgradechecks",
    );
    upgrade_checks.namespaced = false;
    upgrade_checks.status_subresource = false;

    // policy/v1: read by `inplaced restart --selector`; no disruption controller fills its status.
    let mut pdbs = ResourceDef::core("PodDisruptionBudget", "poddisruptionbudgets", true);
    pdbs.group = "policy".into();
    pdbs.short_names = vec!["pdb".into()];
    pdbs.status_subresource = true;
    pdbs.generation = true;

    // apiextensions.k8s.io/v1: a custom resource below is served only while its CRD exists
    // and serves its version (`Store::served`), as kube-apiserver's apiextensions server does.
    let mut crds = ResourceDef::core(
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    );
    crds.group = CRD_GROUP.into();
    crds.short_names = vec!["crd".into(), "crds".into()];
    crds.status_subresource = true;
    crds.generation = true;

    // admissionregistration.k8s.io/v1 (1.30+): enforced on writes by `crate::admission`.
    let mut policies = ResourceDef::core(
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    );
    policies.group = ADMISSION_GROUP.into();
    policies.status_subresource = true;
    policies.generation = true;
    let mut bindings = ResourceDef::core(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    );
    bindings.group = ADMISSION_GROUP.into();
    bindings.generation = true;

    vec![
        pods,
        nodes,
        events,
        namespaces,
        limit_ranges,
        new_events,
        crr,
        resize,
        restart,
        rollouts,
        leases,
        upgrade_checks,
        pdbs,
        crds,
        policies,
        bindings,
    ]
}
