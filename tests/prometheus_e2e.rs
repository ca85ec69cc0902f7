//! A real Prometheus scrapes the agent while pods on the node sandbox are restarted in place by
//! ContainerRecreateRequests. What Prometheus stored — counts, sums, buckets, and what
//! `increase()` and `histogram_quantile()` make of them — must match each restart as containerd's
//! own timestamps and the pod's Ready condition tell it, and every query of the Grafana dashboard
//! must evaluate. The shipped Prometheus rules pass `promtool check rules` and their unit tests
//! (`promtool test rules`). Needs Debian's `prometheus` (`tests/node/prometheus.sh install`;
//! run-all.sh runs it).

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::prometheus::{JOB, Prometheus, Sample, sample_value, samples, single};
use support::sandbox::{Node, all_running, container_id};
use support::unique;

/// Stops within one `sleep 0.1` of SIGTERM and is ready as soon as it runs.
fn quick_container() -> Value {
    json!({"name": "app", "image": "localhost/busybox:local", "command": ["/bin/sh", "-c",
        "trap 'exit 0' TERM; while true; do sleep 0.1; done"]})
}

/// Takes 0.3 s more to stop and becomes ready only after its readiness probe's 1 s initial
/// delay: its stop, ready and total phases land in other buckets than the quick one's.
fn slow_container() -> Value {
    json!({"name": "app", "image": "localhost/busybox:local", "command": ["/bin/sh", "-c",
        "trap 'sleep 0.3; exit 0' TERM; while true; do sleep 0.1; done"],
        "readinessProbe": {"exec": {"command": ["/bin/sh", "-c", "true"]},
            "initialDelaySeconds": 1, "periodSeconds": 1}})
}

/// Float rounding between containerd's nanoseconds, the agent's sums and the text exposition.
const TOLERANCE: f64 = 1e-6;

const WAIT: Duration = Duration::from_secs(60);

/// One restart as containerd, the API server and the test's clock saw it, in seconds, as
/// (lowest, highest) possible value. The kill-issued time is the agent's own: all the test knows is
/// that it lies between the CRR's creation and the StopContainer reaching the CRI proxy, so `stop`
/// and `total` are ranges; `restart` and `ready` are exact (lowest == highest).
struct Observed {
    stop: (f64, f64),
    restart: (f64, f64),
    ready: (f64, f64),
    total: (f64, f64),
}

impl Observed {
    fn phase(&self, phase: &str) -> (f64, f64) {
        match phase {
            "stop" => self.stop,
            "restart" => self.restart,
            "ready" => self.ready,
            "total" => self.total,
            other => panic!("no phase {other}"),
        }
    }
}

const PHASES: [&str; 4] = ["stop", "restart", "ready", "total"];

fn unix_nanos() -> i128 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i128::try_from(since.as_nanos()).expect("nanoseconds fit")
}

fn seconds(from_nanos: i128, to_nanos: i128) -> f64 {
    (to_nanos - from_nanos) as f64 / 1e9
}

fn restarts_counted() -> String {
    format!("inplaced_restarts_total{{job=\"{JOB}\",trigger=\"crr\",result=\"ready\"}}")
}

/// The pod's Ready condition's lastTransitionTime (when Ready is true), in Unix nanoseconds.
fn ready_since(pod: &Value) -> Option<i128> {
    let condition = pod
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")?;
    let since: k8s_openapi::jiff::Timestamp =
        condition["lastTransitionTime"].as_str()?.parse().ok()?;
    Some(since.as_nanosecond())
}

/// Recreates the pod's container through a CRR, waits until Prometheus has scraped the agent's
/// count of it (`restarts_before` + 1), and returns its phases from containerd's timestamps.
async fn restart_by_crr(
    node: &Node,
    prometheus: &Prometheus,
    pod: &str,
    restarts_before: usize,
) -> Observed {
    let old = container_id(&node.pod(pod).expect("the pod"), "app");
    let created = unix_nanos();
    let crr = unique("crr");
    node.create_crr(&crr, pod, &["app"], json!({})).await;
    node.wait_stop_issued(&old, WAIT).await;
    let stop_seen = unix_nanos();
    node.wait_completed(&crr, WAIT).await;
    let replaced = node
        .wait_pod(pod, WAIT, |p| {
            container_id(p, "app") != old && all_running(p)
        })
        .await;
    let new = container_id(&replaced, "app");
    // The agent counts a restart once the pod is Ready again; waiting for Prometheus to show
    // the count also keeps the next kill from racing the agent's view of this restart.
    let counted = (restarts_before + 1) as f64;
    prometheus
        .wait_vector(&restarts_counted(), WAIT, |s| {
            s.len() == 1 && s[0].value == counted
        })
        .await;

    let cri = support::client();
    let finished_at = cri
        .container_status(&old, false)
        .await
        .expect("ContainerStatus of the old container")
        .status
        .expect("old container status")
        .finished_at;
    let started_at = cri
        .container_status(&new, false)
        .await
        .expect("ContainerStatus of the new container")
        .status
        .expect("new container status")
        .started_at;
    let (finished_at, started_at) = (i128::from(finished_at), i128::from(started_at));
    let ready_since = node
        .pod(pod)
        .as_ref()
        .and_then(ready_since)
        .expect("the pod is Ready with a lastTransitionTime");
    // The condition's time has one-second resolution: ready is never before the container ran.
    let ready_at = ready_since.max(started_at);
    Observed {
        stop: (
            seconds(stop_seen, finished_at).max(0.0),
            seconds(created, finished_at),
        ),
        restart: (
            seconds(finished_at, started_at),
            seconds(finished_at, started_at),
        ),
        ready: (seconds(started_at, ready_at), seconds(started_at, ready_at)),
        total: (seconds(stop_seen, ready_at), seconds(created, ready_at)),
    }
}

/// Checks what Prometheus stored of one phase's histogram against the observed restarts.
async fn check_phase(prometheus: &Prometheus, phase: &str, observed: &[Observed]) {
    let selector = format!("{{job=\"{JOB}\",trigger=\"crr\",phase=\"{phase}\"}}");
    let ranges: Vec<(f64, f64)> = observed.iter().map(|o| o.phase(phase)).collect();
    let restarts = ranges.len() as f64;

    let count = prometheus
        .single_value(&format!(
            "inplaced_restart_duration_seconds_count{selector}"
        ))
        .await;
    assert_eq!(count, restarts, "{phase}: one observation per restart");

    let sum = prometheus
        .single_value(&format!("inplaced_restart_duration_seconds_sum{selector}"))
        .await;
    let lowest: f64 = ranges.iter().map(|r| r.0).sum();
    let highest: f64 = ranges.iter().map(|r| r.1).sum();
    assert!(
        lowest - TOLERANCE <= sum && sum <= highest + TOLERANCE,
        "{phase}: Prometheus' sum {sum} s, containerd's timestamps say {lowest}..{highest} s"
    );

    // Each cumulative bucket holds the restarts whose value is at most its bound: at least those
    // whose highest possible value is, at most those whose lowest possible value is.
    let buckets = prometheus
        .vector(&format!(
            "inplaced_restart_duration_seconds_bucket{selector}"
        ))
        .await;
    let mut bounds = Vec::new();
    for Sample { labels, value } in &buckets {
        let le: f64 = labels["le"]
            .as_str()
            .and_then(|le| le.parse().ok())
            .unwrap_or_else(|| panic!("{phase}: bucket without a numeric le: {labels}"));
        let at_least = ranges.iter().filter(|r| r.1 + TOLERANCE <= le).count() as f64;
        let at_most = ranges.iter().filter(|r| r.0 - TOLERANCE <= le).count() as f64;
        assert!(
            at_least <= *value && *value <= at_most,
            "{phase}: bucket le={le} holds {value}, expected {at_least}..{at_most} of {ranges:?}"
        );
        if le.is_finite() {
            bounds.push(le);
        } else {
            assert_eq!(
                *value, restarts,
                "{phase}: the +Inf bucket holds every restart"
            );
        }
    }
    bounds.sort_by(f64::total_cmp);
    assert_eq!(
        (bounds.first(), bounds.last()),
        (Some(&0.005), Some(&600.0)),
        "{phase}: buckets 5 ms .. 10 min (docs/metrics.md), got {bounds:?}"
    );

    // The 100th percentile is the bound of the bucket that holds the longest restart.
    let longest_lowest = ranges.iter().map(|r| r.0).fold(0.0, f64::max);
    let longest_highest = ranges.iter().map(|r| r.1).fold(0.0, f64::max);
    let bucket_of_highest = bounds
        .iter()
        .copied()
        .find(|le| longest_highest + TOLERANCE <= *le)
        .unwrap_or(f64::INFINITY);
    let quantile = prometheus
        .single_value(&format!(
            "histogram_quantile(1, sum by (le) (inplaced_restart_duration_seconds_bucket{selector}))"
        ))
        .await;
    assert!(
        bounds.contains(&quantile)
            && longest_lowest - TOLERANCE <= quantile
            && quantile <= bucket_of_highest,
        "{phase}: histogram_quantile(1) = {quantile}, the longest restart took \
         {longest_lowest}..{longest_highest} s (bounds {bounds:?})"
    );
}

/// `increase()` over a window that holds only the second batch of restarts: at least the raw
/// delta of the stored samples, at most that delta extrapolated to the whole window (Prometheus
/// extrapolates a counter's increase from the first and last sample to the window's edges).
async fn check_increase(prometheus: &Prometheus, from: f64, to: f64, before: usize, after: usize) {
    let window_ms = ((to - from) * 1000.0).floor();
    let counter = restarts_counted();
    let raw = prometheus
        .query_at(&format!("{counter}[{window_ms}ms]"), Some(to))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let points = raw
        .pointer("/result/0/values")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no samples of {counter} in the window: {raw}"));
    let stored: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.get(0)?.as_f64()?, sample_value(p)?)))
        .collect();
    let (Some(first), Some(last)) = (stored.first(), stored.last()) else {
        panic!("no samples of {counter} in the window: {raw}");
    };
    assert_eq!(
        (first.1, last.1),
        (before as f64, after as f64),
        "the window starts after the first batch and ends after the second: {stored:?}"
    );
    let delta = (after - before) as f64;
    let sampled = last.0 - first.0;
    let window = window_ms / 1000.0;
    let increase_expr = format!("increase({counter}[{window_ms}ms])");
    let increase = single(
        &increase_expr,
        &prometheus.vector_at(&increase_expr, Some(to)).await,
    );
    assert!(
        delta - TOLERANCE <= increase && increase <= delta * window / sampled + TOLERANCE,
        "increase() = {increase}: {delta} restarts, samples over {sampled} s of a {window} s window"
    );
}

/// Every `expr` anywhere in the dashboard (panels, rows, whatever nests them).
fn dashboard_exprs(node: &Value, found: &mut Vec<String>) {
    match node {
        Value::Object(fields) => {
            for (key, value) in fields {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => found.push(expr.clone()),
                    _ => dashboard_exprs(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| dashboard_exprs(i, found)),
        _ => {}
    }
}

/// An expression as Grafana sends it with `$instance` set to `instance` (a single value is
/// substituted as it is; "All" is the variable's allValue `.*`). Grafana's interval variables get
/// typical values.
fn substitute(expr: &str, instance: &str) -> String {
    let substituted = [
        ("${instance}", instance),
        ("$instance", instance),
        ("$__rate_interval", "1m"),
        ("$__interval", "15s"),
        ("$__range", "1h"),
    ]
    .iter()
    .fold(expr.to_owned(), |e, (variable, value)| {
        e.replace(variable, value)
    });
    assert!(
        !substituted.contains('$'),
        "a dashboard variable this test does not know: {expr}"
    );
    substituted
}

/// The dashboard's variables resolve and each of its queries is valid PromQL that Prometheus
/// evaluates; the restart panels show this test's restarts.
async fn check_dashboard(prometheus: &Prometheus, target: &str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/grafana/inplaced-dashboard.json"
    );
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read the Grafana dashboard"))
            .expect("the dashboard is JSON");

    // `label_values(metric, label)` is Grafana's, not PromQL: Grafana asks the label values API.
    let variables = dashboard
        .pointer("/templating/list")
        .and_then(Value::as_array)
        .expect("dashboard variables");
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["query"].as_str().unwrap_or_default();
        let (metric, label) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.split_once(','))
            .map(|(m, l)| (m.trim(), l.trim()))
            .unwrap_or_else(|| panic!("a variable query this test does not know: {query}"));
        let body = prometheus
            .get(&format!(
                "/api/v1/label/{label}/values?match[]={}",
                support::prometheus::percent_encode(metric)
            ))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let values: Value = serde_json::from_str(&body).expect("JSON answer");
        assert!(
            values["status"] == "success"
                && values["data"]
                    .as_array()
                    .is_some_and(|v| v.contains(&json!(target))),
            "variable {query} does not offer the agent {target}: {body}"
        );
    }

    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard["panels"], &mut exprs);
    assert!(!exprs.is_empty(), "the dashboard has queries");
    for expr in &exprs {
        for instance in [target, ".*"] {
            let query = substitute(expr, instance);
            let data = prometheus
                .query_at(&query, None)
                .await
                .unwrap_or_else(|e| panic!("the dashboard query does not evaluate: {e}"));
            let shown =
                samples(&data).unwrap_or_else(|| panic!("{query}: not an instant vector: {data}"));
            let shows_this_test = expr.contains("inplaced_restart")
                || expr.contains("inplaced_resize")
                || expr.contains("build_info");
            assert!(
                !shows_this_test || !shown.is_empty(),
                "{query} shows nothing after this test's restarts: {data}"
            );
        }
    }
}

/// One in-place resize (through the kubelet: the node's 1.30 kubelet has the resize gate on,
/// which its pod status shows): Prometheus stores it once, under the actuator the request got,
/// with a duration no longer than the test saw from creating the request to seeing it Succeeded.
async fn check_resize(node: &Node, prometheus: &Prometheus) {
    let pod = unique("sized");
    let mut app = quick_container();
    app["resources"] = json!({"requests": {"cpu": "100m", "memory": "32Mi"},
                              "limits": {"cpu": "200m", "memory": "64Mi"}});
    node.run_pod(&pod, json!({ "containers": [app] })).await;
    let created = unix_nanos();
    let name = node
        .create_resize(json!({"podName": pod, "containers": [
            {"name": "app", "resources": {"limits": {"cpu": "300m"}}}]}))
        .await;
    let done = node.wait_resize_final(&name, WAIT).await;
    let seen = unix_nanos();
    assert_eq!(done["status"]["phase"], "Succeeded", "{done:#}");
    assert_eq!(done["status"]["actuator"], "kubelet", "{done:#}");
    let selector = format!("{{job=\"{JOB}\",actuator=\"kubelet\",result=\"Succeeded\"}}");
    prometheus
        .wait_vector(&format!("inplaced_resizes_total{selector}"), WAIT, |s| {
            s.len() == 1 && s[0].value == 1.0
        })
        .await;
    // Two scrapes of the duration histogram, which appears with the first resize (the counter
    // exists from the start), so that the dashboard's rate()s have something to show.
    prometheus
        .wait_vector(
            &format!("count_over_time(inplaced_resize_duration_seconds_count{selector}[5m])"),
            WAIT,
            |s| s.len() == 1 && s[0].value >= 2.0,
        )
        .await;
    let count = prometheus
        .single_value(&format!("inplaced_resize_duration_seconds_count{selector}"))
        .await;
    assert_eq!(count, 1.0);
    let sum = prometheus
        .single_value(&format!("inplaced_resize_duration_seconds_sum{selector}"))
        .await;
    assert!(
        sum > 0.0 && sum <= seconds(created, seen),
        "resize took {sum} s by the agent, at most {} s by the test",
        seconds(created, seen)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the test containerd: run tests/run-all.sh"]
async fn prometheus_stores_every_restart_phase_as_containerd_timed_it() {
    // Before anything else: a missing Prometheus fails here with the install hint.
    support::prometheus::binary();
    let mut node = Node::start().await;
    let target = node.agent().listen;
    let prometheus = Prometheus::start(target).await;
    let up = format!("up{{job=\"{JOB}\"}}");
    prometheus
        .wait_vector(&up, WAIT, |s| s.len() == 1 && s[0].value == 1.0)
        .await;

    let mut pods = Vec::new();
    for (prefix, container) in [("quick", quick_container()), ("slow", slow_container())] {
        let name = unique(prefix);
        node.run_pod(&name, json!({ "containers": [container] }))
            .await;
        pods.push(name);
    }

    // Two batches, one restart of each pod per batch; `between` separates them for increase().
    let mut observed = Vec::new();
    for pod in &pods {
        observed.push(restart_by_crr(&node, &prometheus, pod, observed.len()).await);
    }
    let first_batch = observed.len();
    let between = unix_nanos() as f64 / 1e9;
    // A scrape after `between` has stored the first batch's count: the window starts with it.
    prometheus
        .wait_vector(&format!("timestamp({})", restarts_counted()), WAIT, |s| {
            s.len() == 1 && s[0].value > between
        })
        .await;
    for pod in &pods {
        observed.push(restart_by_crr(&node, &prometheus, pod, observed.len()).await);
    }
    let end = unix_nanos() as f64 / 1e9;

    for phase in PHASES {
        check_phase(&prometheus, phase, &observed).await;
    }
    // total = kill issued → ready, which the other three phases split without gap or overlap.
    let mut phase_sums = Vec::new();
    for phase in PHASES {
        let selector = format!("{{job=\"{JOB}\",trigger=\"crr\",phase=\"{phase}\"}}");
        phase_sums.push(
            prometheus
                .single_value(&format!("inplaced_restart_duration_seconds_sum{selector}"))
                .await,
        );
    }
    let parts: f64 = phase_sums[..3].iter().sum();
    assert!(
        (phase_sums[3] - parts).abs() < TOLERANCE,
        "total {} vs stop + restart + ready {parts}",
        phase_sums[3]
    );
    // Other triggers' counters exist from the start, at 0: none may have moved.
    let misattributed = prometheus
        .vector(&format!(
            "{{job=\"{JOB}\",__name__=~\"inplaced_restart.*\",trigger!=\"crr\"}} > 0"
        ))
        .await;
    assert!(
        misattributed.is_empty(),
        "only CRRs restarted containers here: {misattributed:?}"
    );
    check_increase(&prometheus, between, end, first_batch, observed.len()).await;
    check_resize(&node, &prometheus).await;
    check_dashboard(&prometheus, &target.to_string()).await;
    assert_eq!(prometheus.single_value(&up).await, 1.0, "still scraped");

    prometheus.stop().await;
    node.stop().await;
}

/// The shipped rules file is valid for Prometheus and passes its unit tests, both by the package's
/// promtool: `promtool check rules packaging/prometheus/inplaced-rules.yaml` and `promtool test
/// rules tests/prometheus/inplaced-rules.test.yaml` (input series of several nodes and targets;
/// each recording rule's values, each alert firing and not firing).
#[test]
#[ignore = "needs Debian's prometheus package (promtool): run tests/run-all.sh"]
fn shipped_rules_pass_promtool_check_and_their_unit_tests() {
    // promtool is in the same package as the server, beside it; a missing package fails here
    // with the install hint.
    let promtool = std::path::Path::new(&support::prometheus::binary()).with_file_name("promtool");
    for args in [
        ["check", "rules", "packaging/prometheus/inplaced-rules.yaml"],
        ["test", "rules", "tests/prometheus/inplaced-rules.test.yaml"],
    ] {
        let output = std::process::Command::new(&promtool)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", promtool.display()));
        assert!(
            output.status.success(),
            "promtool {} failed ({}):\n{}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
