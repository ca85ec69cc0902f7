//! The Helm chart of the cluster side (packaging/helm/inplaced) against what it wraps: `helm lint`
//! and `helm template` (the real helm v4, built from tests/kube/k8s-tools) for both identities,
//! every rendered object compared with the one packaging/kubernetes ships (parsed, object by
//! object, equal but for the labels the chart adds and the CRDs' keep policy); the monitoring
//! toggles against packaging/prometheus and packaging/grafana; and, on a real kube-apiserver,
//! `helm install`, `helm upgrade` to the other identity and `helm uninstall`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use real_cluster::{Binaries, ControlPlane, ControlPlaneConfig, NEWEST, wait_until};
use serde::Deserialize;
use serde_json::{Value, json};
use support::real::kubectl;

/// The release name the tests install and render as.
const RELEASE: &str = "inplaced";
/// The labels the chart adds to every object (templates/_helpers.tpl, "inplaced.labels"), beside
/// the `app.kubernetes.io/name` the shipped files set themselves.
const CHART_LABELS: [&str; 5] = [
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];
/// The annotation that keeps the CRDs on `helm uninstall` (values: crds.keep, on by default).
const KEEP: &str = "helm.sh/resource-policy";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("packaging/helm/inplaced")
}

/// helm, with its cache, config and data under `home` (not the user's).
fn helm(home: &Path) -> Command {
    let helm = Binaries::tools()
        .and_then(|tools| tools.path("helm"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut command = Command::new(helm);
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

/// Runs a command: its stdout, or an error with its stderr.
fn output(mut command: Command) -> Result<String, String> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{command:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn run(command: Command) -> String {
    output(command).unwrap_or_else(|e| panic!("{e}"))
}

/// Every object of a multi-document YAML text (documents that are only comments left out).
fn objects(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn shipped_file(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join(path)).expect(path);
    objects(&text)
}

/// What the chart must render for `identity` with its default values: the shipped CRDs, the
/// identity's RBAC file and the admission policies, keyed by kind and name.
fn shipped_cluster_side(identity: &str) -> BTreeMap<(String, String), Value> {
    let mut files: Vec<String> = std::fs::read_dir(repo().join("packaging/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with("crd-") && f.ends_with(".yaml"))
        .map(|f| format!("packaging/kubernetes/{f}"))
        .collect();
    assert!(files.len() >= 4, "the shipped CRDs: {files:?}");
    files.push(format!("packaging/kubernetes/rbac-{identity}.yaml"));
    files.push("packaging/kubernetes/admission-policy.yaml".into());
    let mut all = BTreeMap::new();
    for file in &files {
        for object in shipped_file(file) {
            let previous = all.insert(key(&object), object);
            assert!(previous.is_none(), "{file}: a kind and name shipped twice");
        }
    }
    all
}

fn key(object: &Value) -> (String, String) {
    (
        object["kind"].as_str().expect("kind").to_string(),
        object["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string(),
    )
}

/// `helm template` of the chart directory (or a packaged chart) with `values` (`--set` pairs).
fn render(home: &Path, chart: &Path, values: &[&str]) -> Result<Vec<Value>, String> {
    let mut command = helm(home);
    command
        .args(["template", RELEASE])
        .arg(chart)
        .args(["--namespace", "monitoring"]);
    for value in values {
        command.args(["--set", value]);
    }
    output(command).map(|text| objects(&text))
}

fn by_key(objects: Vec<Value>) -> BTreeMap<(String, String), Value> {
    let mut all = BTreeMap::new();
    for object in objects {
        let k = key(&object);
        assert!(
            all.insert(k.clone(), object).is_none(),
            "rendered twice: {k:?}"
        );
    }
    all
}

/// A rendered object without what the chart adds to the shipped one: its labels (checked to
/// have Helm's values) and, on CRDs when `keep`, the keep policy (checked to be there).
fn as_shipped(rendered: &Value, shipped: &Value, keep: bool) -> Value {
    let mut object = rendered.clone();
    let name = key(rendered);
    let metadata = object["metadata"].as_object_mut().unwrap();
    let labels = metadata
        .get_mut("labels")
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{name:?} has no labels"));
    assert_eq!(
        labels.get("app.kubernetes.io/managed-by"),
        Some(&json!("Helm")),
        "{name:?}"
    );
    assert_eq!(
        labels.get("app.kubernetes.io/instance"),
        Some(&json!(RELEASE)),
        "{name:?}"
    );
    for label in CHART_LABELS {
        if shipped["metadata"]["labels"].get(label).is_none() {
            labels.remove(label);
        }
    }
    if labels.is_empty() && shipped["metadata"].get("labels").is_none() {
        metadata.remove("labels");
    }
    let crd = name.0 == "CustomResourceDefinition";
    let annotation = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove(KEEP));
    assert_eq!(
        annotation,
        (crd && keep).then(|| json!("keep")),
        "{name:?}: the keep policy"
    );
    if metadata
        .get("annotations")
        .is_some_and(|a| a.as_object().unwrap().is_empty())
        && shipped["metadata"].get("annotations").is_none()
    {
        metadata.remove("annotations");
    }
    object
}

/// Every shipped object rendered, equal but for what the chart adds, and nothing else
/// rendered but `extra` kinds.
fn assert_renders_shipped(
    rendered: &BTreeMap<(String, String), Value>,
    shipped: &BTreeMap<(String, String), Value>,
    keep: bool,
    extra: &[&str],
) {
    for (k, expected) in shipped {
        let got = rendered
            .get(k)
            .unwrap_or_else(|| panic!("the chart does not render {k:?}"));
        let got = as_shipped(got, expected, keep);
        assert!(
            &got == expected,
            "{k:?} differs from the shipped object\nrendered: {}\nshipped: {}",
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(expected).unwrap()
        );
    }
    let unexpected: Vec<_> = rendered
        .keys()
        .filter(|k| !shipped.contains_key(*k) && !extra.contains(&k.0.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "rendered, not shipped: {unexpected:?}"
    );
}

#[test]
fn the_chart_carries_the_crates_version() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).unwrap();
    let meta: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(meta["name"], json!("inplaced"));
    assert_eq!(meta["version"], json!(env!("CARGO_PKG_VERSION")));
    assert_eq!(meta["appVersion"], json!(env!("CARGO_PKG_VERSION")));
}

/// One source of truth: the chart's files/ are links to packaging/, and the chart holds no other
/// YAML or JSON than its own metadata, values and templates.
#[test]
fn the_chart_reads_packaging_through_links_and_holds_no_copy() {
    for dir in ["kubernetes", "prometheus", "grafana"] {
        let link = chart().join("files").join(dir);
        let meta = std::fs::symlink_metadata(&link).unwrap();
        assert!(
            meta.file_type().is_symlink(),
            "{} is not a link",
            link.display()
        );
        assert_eq!(
            std::fs::canonicalize(&link).unwrap(),
            std::fs::canonicalize(repo().join("packaging").join(dir)).unwrap(),
            "{}",
            link.display()
        );
    }
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                walk(&entry.path(), found);
            } else if kind.is_file() {
                found.push(entry.path());
            }
        }
    }
    let mut files = Vec::new();
    walk(&chart(), &mut files);
    for file in files {
        let relative = file
            .strip_prefix(chart())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let own = relative.starts_with("templates/")
            || ["Chart.yaml", "values.yaml", ".helmignore"].contains(&relative.as_str());
        assert!(own, "{relative}: a file of its own in the chart (a copy?)");
    }
}

#[test]
#[ignore = "needs helm, built by tests/kube/build.sh: run tests/run-all.sh"]
fn helm_lint_passes_for_both_identities_and_every_toggle() {
    let home = tempfile::tempdir().unwrap();
    for identity in ["node-bound", "dedicated"] {
        for toggles in [
            "crds.install=true",
            "prometheusRule.enabled=true,grafanaDashboard.enabled=true,scrapeConfig.enabled=true",
        ] {
            let mut command = helm(home.path());
            command
                .args(["lint", "--strict"])
                .arg(chart())
                .args(["--set", &format!("identity={identity},{toggles}")]);
            let said = run(command);
            assert!(said.contains("0 chart(s) failed"), "{said}");
        }
    }
}

#[test]
#[ignore = "needs helm, built by tests/kube/build.sh: run tests/run-all.sh"]
fn helm_template_renders_exactly_the_shipped_objects_for_each_identity() {
    let home = tempfile::tempdir().unwrap();
    for identity in ["node-bound", "dedicated"] {
        let rendered = by_key(
            render(home.path(), &chart(), &[&format!("identity={identity}")])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_renders_shipped(&rendered, &shipped_cluster_side(identity), true, &[]);
    }
    // The default identity is the node-bound one (docs/install.md's (a)).
    let default = by_key(render(home.path(), &chart(), &[]).unwrap());
    assert_renders_shipped(&default, &shipped_cluster_side("node-bound"), true, &[]);
}

#[test]
#[ignore = "needs helm, built by tests/kube/build.sh: run tests/run-all.sh"]
fn the_values_leave_out_crds_or_policies_keep_or_not_and_refuse_an_unknown_identity() {
    let home = tempfile::tempdir().unwrap();
    let mut shipped = shipped_cluster_side("dedicated");
    let rendered = by_key(
        render(
            home.path(),
            &chart(),
            &["identity=dedicated", "crds.keep=false"],
        )
        .unwrap(),
    );
    assert_renders_shipped(&rendered, &shipped, false, &[]);

    let rendered = by_key(
        render(
            home.path(),
            &chart(),
            &["identity=dedicated", "crds.install=false"],
        )
        .unwrap(),
    );
    shipped.retain(|k, _| k.0 != "CustomResourceDefinition");
    assert_renders_shipped(&rendered, &shipped, true, &[]);

    let rendered = by_key(
        render(
            home.path(),
            &chart(),
            &[
                "identity=dedicated",
                "crds.install=false",
                "admissionPolicies.enabled=false",
            ],
        )
        .unwrap(),
    );
    shipped.retain(|k, _| !k.0.starts_with("ValidatingAdmissionPolicy"));
    assert_renders_shipped(&rendered, &shipped, true, &[]);
    assert!(shipped.keys().all(|k| k.0.starts_with("ClusterRole")));

    let refused = render(home.path(), &chart(), &["identity=kubelet"]).unwrap_err();
    assert!(
        refused.contains("identity must be node-bound or dedicated"),
        "{refused}"
    );
}

#[test]
#[ignore = "needs helm, built by tests/kube/build.sh: run tests/run-all.sh"]
fn the_monitoring_toggles_wrap_the_shipped_rules_dashboard_and_a_node_port_scrape() {
    let home = tempfile::tempdir().unwrap();
    // Off by default (each needs the Prometheus Operator's CRDs or a Grafana sidecar).
    let default = by_key(render(home.path(), &chart(), &[]).unwrap());
    for kind in ["PrometheusRule", "ConfigMap", "ScrapeConfig"] {
        assert!(
            !default.keys().any(|k| k.0 == kind),
            "{kind} rendered by default"
        );
    }

    let rendered = render(
        home.path(),
        &chart(),
        &[
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=kube-prometheus-stack",
            "grafanaDashboard.enabled=true",
            "scrapeConfig.enabled=true",
        ],
    )
    .unwrap();
    let rendered = by_key(rendered);
    assert_renders_shipped(
        &rendered,
        &shipped_cluster_side("node-bound"),
        true,
        &["PrometheusRule", "ConfigMap", "ScrapeConfig"],
    );
    let one = |kind: &str| -> &Value {
        let found: Vec<_> = rendered.iter().filter(|(k, _)| k.0 == kind).collect();
        assert_eq!(found.len(), 1, "{kind}: {found:?}");
        found[0].1
    };

    // The rule groups as packaging/prometheus ships them, in the release's namespace.
    let rules: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("packaging/prometheus/inplaced-rules.yaml")).unwrap(),
    )
    .unwrap();
    let rule = one("PrometheusRule");
    assert_eq!(rule["apiVersion"], json!("monitoring.coreos.com/v1"));
    assert_eq!(rule["metadata"]["namespace"], json!("monitoring"));
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        json!("kube-prometheus-stack")
    );
    assert_eq!(rule["spec"]["groups"], rules["groups"]);
    assert_eq!(rule["spec"].as_object().unwrap().len(), 1, "{rule}");

    // The dashboard, byte for byte, labelled for the sidecar.
    let dashboard = one("ConfigMap");
    assert_eq!(
        dashboard["metadata"]["labels"]["grafana_dashboard"],
        json!("1")
    );
    let data = dashboard["data"].as_object().unwrap();
    assert_eq!(data.len(), 1, "{data:?}");
    let shipped_dashboard =
        std::fs::read_to_string(repo().join("packaging/grafana/inplaced-dashboard.json")).unwrap();
    assert_eq!(
        data["inplaced-dashboard.json"].as_str().unwrap().trim_end(),
        shipped_dashboard.trim_end()
    );

    // Every node's InternalIP on the agents' port (docs/metrics.md), under the job the shipped
    // InplacedAgentDown alert selects.
    let scrape = one("ScrapeConfig");
    assert_eq!(
        scrape["apiVersion"],
        json!("monitoring.coreos.com/v1alpha1")
    );
    assert_eq!(
        scrape["spec"]["kubernetesSDConfigs"],
        json!([{"role": "Node"}])
    );
    let relabelings = scrape["spec"]["relabelings"].as_array().unwrap();
    let address = relabelings
        .iter()
        .find(|r| r["targetLabel"] == "__address__")
        .expect("a relabeling of __address__");
    assert_eq!(
        address["sourceLabels"],
        json!(["__meta_kubernetes_node_address_InternalIP"])
    );
    assert_eq!(address["replacement"], json!("${1}:10231"));
    let instance = relabelings
        .iter()
        .find(|r| r["targetLabel"] == "instance")
        .expect("instance relabelled");
    assert_eq!(
        instance["sourceLabels"],
        json!(["__meta_kubernetes_node_name"])
    );
    let agent_down = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .find(|r| r["alert"] == "InplacedAgentDown")
        .expect("the shipped InplacedAgentDown");
    let expr = agent_down["expr"].as_str().unwrap();
    let job = scrape["spec"]["jobName"].as_str().unwrap();
    assert!(
        expr.contains(&format!("job=\"{job}\"")),
        "the scrape's job {job:?} is not the one InplacedAgentDown selects: {expr}"
    );
}

/// `helm package` resolves the links: the packaged chart renders the same objects.
#[test]
#[ignore = "needs helm, built by tests/kube/build.sh: run tests/run-all.sh"]
fn the_packaged_chart_renders_the_same_objects() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("packaged");
    let mut command = helm(home.path());
    command
        .arg("package")
        .arg(chart())
        .arg("--destination")
        .arg(&out);
    run(command);
    let archive = out.join(format!("inplaced-{}.tgz", env!("CARGO_PKG_VERSION")));
    assert!(archive.exists(), "{}", archive.display());
    let values = [
        "identity=dedicated",
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
        "scrapeConfig.enabled=true",
    ];
    let from_dir = render(home.path(), &chart(), &values).unwrap();
    let packaged = render(home.path(), &archive, &values).unwrap();
    assert_eq!(packaged, from_dir);
    assert_renders_shipped(
        &by_key(packaged),
        &shipped_cluster_side("dedicated"),
        true,
        &["PrometheusRule", "ConfigMap", "ScrapeConfig"],
    );
}

/// Whether `live` holds everything `shipped` says (the apiserver adds defaults and metadata).
fn holds(live: &Value, shipped: &Value) -> bool {
    match (live, shipped) {
        (Value::Object(live), Value::Object(shipped)) => shipped
            .iter()
            .all(|(k, v)| live.get(k).is_some_and(|l| holds(l, v))),
        (Value::Array(live), Value::Array(shipped)) => {
            live.len() == shipped.len() && live.iter().zip(shipped).all(|(l, s)| holds(l, s))
        }
        _ => live == shipped,
    }
}

/// The resource kubectl names a shipped kind by.
fn resource(kind: &str) -> &'static str {
    match kind {
        "CustomResourceDefinition" => "customresourcedefinitions.apiextensions.k8s.io",
        "ClusterRole" => "clusterroles.rbac.authorization.k8s.io",
        "ClusterRoleBinding" => "clusterrolebindings.rbac.authorization.k8s.io",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies.admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding" => {
            "validatingadmissionpolicybindings.admissionregistration.k8s.io"
        }
        other => panic!("a shipped kind the test does not know: {other}"),
    }
}

/// The live object, if there is one.
fn live(cluster: &ControlPlane, kind: &str, name: &str) -> Option<Value> {
    let text = kubectl(
        cluster,
        &["get", resource(kind), name, "--ignore-not-found", "-o=json"],
    );
    (!text.trim().is_empty()).then(|| serde_json::from_str(&text).unwrap())
}

/// Every shipped object of `identity` live as shipped and managed by the release.
fn assert_live_as_shipped(cluster: &ControlPlane, identity: &str) {
    for ((kind, name), shipped) in shipped_cluster_side(identity) {
        let object = live(cluster, &kind, &name)
            .unwrap_or_else(|| panic!("{kind} {name} is not there after helm install"));
        let mut expected = shipped.clone();
        if kind == "CustomResourceDefinition" {
            expected["metadata"]["annotations"][KEEP] = json!("keep");
        }
        expected["metadata"]["annotations"]["meta.helm.sh/release-name"] = json!(RELEASE);
        expected["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        assert!(
            holds(&object, &expected),
            "{kind} {name} is not as shipped\nlive: {}\nshipped: {}",
            serde_json::to_string_pretty(&object).unwrap(),
            serde_json::to_string_pretty(&expected).unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the real Kubernetes binaries: run tests/run-all.sh"]
async fn helm_installs_upgrades_and_uninstalls_the_chart_on_a_real_apiserver() {
    let cluster = ControlPlane::start(ControlPlaneConfig::new(NEWEST))
        .await
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let helm_on = |args: &[&str]| {
        let mut command = helm(home.path());
        command.args(args).arg(format!(
            "--kubeconfig={}",
            cluster.admin_kubeconfig().display()
        ));
        run(command)
    };
    let mut install = vec!["install", RELEASE];
    let chart = chart();
    let chart = chart.to_str().unwrap();
    install.extend([chart, "--namespace=inplaced-system", "--create-namespace"]);
    helm_on(&install);

    let node_bound = shipped_cluster_side("node-bound");
    let crds: Vec<String> = node_bound
        .keys()
        .filter(|k| k.0 == "CustomResourceDefinition")
        .map(|k| format!("crd/{}", k.1))
        .collect();
    let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    wait.extend(crds.iter().map(String::as_str));
    kubectl(&cluster, &wait);
    assert_live_as_shipped(&cluster, "node-bound");
    // The policies type-check (their status says so once the controller has looked).
    wait_until(
        "the policies' type checking",
        Duration::from_secs(60),
        || {
            let cluster = &cluster;
            let node_bound = &node_bound;
            async move {
                let checked = node_bound
                    .keys()
                    .filter(|k| k.0 == "ValidatingAdmissionPolicy")
                    .all(|(kind, name)| {
                        let policy = live(cluster, kind, name).unwrap();
                        policy["status"]["typeChecking"].is_object()
                            && policy["status"]["typeChecking"]
                                .get("expressionWarnings")
                                .is_none()
                    });
                Ok(checked.then_some(()))
            }
        },
    )
    .await
    .unwrap();

    // The other identity by value: its role and binding replace the node-bound ones.
    let mut upgrade = vec!["upgrade", RELEASE, chart];
    upgrade.extend(["--namespace=inplaced-system", "--set=identity=dedicated"]);
    helm_on(&upgrade);
    assert_live_as_shipped(&cluster, "dedicated");
    let dedicated = shipped_cluster_side("dedicated");
    for (kind, name) in node_bound.keys().filter(|k| !dedicated.contains_key(*k)) {
        assert!(
            live(&cluster, kind, name).is_none(),
            "{kind} {name} is still there after the upgrade to the dedicated identity"
        );
    }

    // helm uninstall removes what it installed but the CRDs (kept: deleting one deletes its
    // requests); helm says so.
    let said = helm_on(&["uninstall", RELEASE, "--namespace=inplaced-system"]);
    for (kind, name) in dedicated.keys() {
        let there = live(&cluster, kind, name).is_some();
        if kind == "CustomResourceDefinition" {
            assert!(there, "the kept CRD {name} went with helm uninstall");
            assert!(
                said.contains(name.as_str()),
                "helm names what it kept: {said}"
            );
        } else {
            assert!(!there, "{kind} {name} is still there after helm uninstall");
        }
    }
    let releases = helm_on(&["list", "--all-namespaces", "-q"]);
    assert!(releases.trim().is_empty(), "releases left: {releases}");
}
