//! The agent's Prometheus metrics: one registry, one `inplaced_` prefix, bounded labels only
//! (methods, verbs, resources, codes — never pod names or UIDs).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::cri::CallObserver;

mod labels;
pub use labels::{EnvRestartResult, RestartPhase, RestartResult, Trigger};

/// Explicit buckets from 5 ms to 10 min: a CRI stop takes milliseconds, a kubelet restart with
/// back-off or an image pull minutes.
const RESTART_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];

fn restart_histogram() -> Histogram {
    Histogram::new(RESTART_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestartPhaseLabels {
    trigger: &'static str,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestartResultLabels {
    trigger: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResizeLabels {
    actuator: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CriCallLabels {
    method: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiCallLabels {
    verb: String,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

fn request_histogram() -> Histogram {
    // 1 ms .. 32 s: CRI calls take milliseconds, a slow StopContainer or a watch list seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric the agent exports. Cheap to clone (shared behind `Arc`s).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    cri_requests: Family<CriCallLabels, Histogram>,
    api_requests: Family<ApiCallLabels, Histogram>,
    watch_restarts: Family<WatchLabels, Counter>,
    node_view_refreshes: Family<ResultLabels, Counter>,
    restart_phases: Family<RestartPhaseLabels, Histogram>,
    restarts: Family<RestartResultLabels, Counter>,
    env_restarts: Family<ResultLabels, Counter>,
    runtime_meta_patches: Family<ResultLabels, Counter>,
    resize_durations: Family<ResizeLabels, Histogram>,
    resizes: Family<ResizeLabels, Counter>,
    resize_reapplies: Counter,
    crr_reactions: Histogram,
    upgrade_containers: Family<UpgradeLabels, Gauge>,
    upgrade_checkpoint_hazard: Family<UpgradeTargetLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpgradeLabels {
    target: String,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpgradeTargetLabels {
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("inplaced");
        registry.register(
            "build",
            "The running build of inplaced",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        let cri_requests = Family::<CriCallLabels, Histogram>::new_with_constructor(
            request_histogram as fn() -> Histogram,
        );
        registry.register(
            "cri_request_duration_seconds",
            "Latency of CRI calls by method and gRPC code",
            cri_requests.clone(),
        );
        let api_requests = Family::<ApiCallLabels, Histogram>::new_with_constructor(
            request_histogram as fn() -> Histogram,
        );
        registry.register(
            "api_request_duration_seconds",
            "Latency of Kubernetes API requests by verb, resource and HTTP code (watches: until the response starts)",
            api_requests.clone(),
        );
        let watch_restarts = Family::<WatchLabels, Counter>::default();
        registry.register(
            "watch_restarts",
            "Kubernetes watches that ended with an error and were restarted, by resource",
            watch_restarts.clone(),
        );
        let node_view_refreshes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "node_view_refreshes",
            "Refreshes of the node view from the container runtime, by result",
            node_view_refreshes.clone(),
        );
        let restart_phases = Family::<RestartPhaseLabels, Histogram>::new_with_constructor(
            restart_histogram as fn() -> Histogram,
        );
        registry.register(
            "restart_duration_seconds",
            "In-place restarts by trigger and phase (stop, restart, ready, total), from CRI timestamps",
            restart_phases.clone(),
        );
        let restarts = Family::<RestartResultLabels, Counter>::default();
        registry.register(
            "restarts",
            "In-place restarts by trigger and result (ready, not-ready)",
            restarts.clone(),
        );
        let env_restarts = Family::<ResultLabels, Counter>::default();
        registry.register(
            "env_restarts",
            "Env-from-metadata restarts by result (success, error, unmatched: the restarted container still did not match and is left alone, not_restartable: the pod's restartPolicy is not Always or it is a static pod)",
            env_restarts.clone(),
        );
        let runtime_meta_patches = Family::<ResultLabels, Counter>::default();
        registry.register(
            "runtime_meta_patches",
            "Writes of the apps.kruise.io/runtime-containers-meta pod annotation by result",
            runtime_meta_patches.clone(),
        );
        let resize_durations = Family::<ResizeLabels, Histogram>::new_with_constructor(
            restart_histogram as fn() -> Histogram,
        );
        registry.register(
            "resize_duration_seconds",
            "ContainerResizeRequests from the agent taking one up to its final phase, by actuator (cri, kubelet) and result (Succeeded, Failed, Infeasible)",
            resize_durations.clone(),
        );
        let resizes = Family::<ResizeLabels, Counter>::default();
        registry.register(
            "resizes",
            "ContainerResizeRequests finished, by actuator and result",
            resizes.clone(),
        );
        let resize_reapplies = Counter::default();
        registry.register(
            "resize_reapplies",
            "cri resizes applied again because the kubelet replaced a resized container",
            resize_reapplies.clone(),
        );
        // 0.5 ms .. 16 s: the agent's own reaction is milliseconds, a busy node's much more.
        let crr_reactions = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "crr_reaction_duration_seconds",
            "ContainerRecreateRequests from the agent's watch event to the first kill issued (target confirmed with the runtime, intent journalled)",
            crr_reactions.clone(),
        );
        let upgrade_containers = Family::<UpgradeLabels, Gauge>::default();
        registry.register(
            "upgrade_containers",
            "This node's containers by what the kubelet of an upgrade target release would do to them: restart (its hash differs), keep, unknown (cannot tell), not_running",
            upgrade_containers.clone(),
        );
        let upgrade_checkpoint_hazard = Family::<UpgradeTargetLabels, Gauge>::default();
        registry.register(
            "upgrade_checkpoint_hazard",
            "1 when a kubelet checkpoint file on this node would stop the kubelet of an upgrade target release from starting, else 0",
            upgrade_checkpoint_hazard.clone(),
        );
        // The outcomes are known in advance: their series exist at 0 from the start, so that
        // the first error after an agent restart is an increase that rate() and alerts see.
        for result in ["success", "error"] {
            drop(node_view_refreshes.get_or_create(&ResultLabels { result }));
            drop(runtime_meta_patches.get_or_create(&ResultLabels { result }));
        }
        for result in EnvRestartResult::ALL {
            drop(env_restarts.get_or_create(&ResultLabels {
                result: result.as_str(),
            }));
        }
        for trigger in Trigger::ALL {
            for result in RestartResult::ALL {
                drop(restarts.get_or_create(&RestartResultLabels {
                    trigger: trigger.as_str(),
                    result: result.as_str(),
                }));
            }
        }
        for actuator in ["cri", "kubelet"] {
            for result in ["Succeeded", "Failed", "Infeasible"] {
                drop(resizes.get_or_create(&ResizeLabels { actuator, result }));
            }
        }
        drop(resizes.get_or_create(&ResizeLabels {
            actuator: "none",
            result: "Failed",
        }));
        Self {
            upgrade_containers,
            upgrade_checkpoint_hazard,
            crr_reactions,
            resize_durations,
            resizes,
            resize_reapplies,
            env_restarts,
            runtime_meta_patches,
            restart_phases,
            restarts,
            registry: Arc::new(registry),
            cri_requests,
            api_requests,
            watch_restarts,
            node_view_refreshes,
        }
    }

    /// OpenMetrics text exposition of everything registered.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// The upgrade targets' answers for this node, replacing the previous ones (a target no
    /// longer checked loses its series).
    pub(crate) fn set_upgrade_summaries(&self, summaries: &[crate::upgrade::TargetSummary]) {
        self.upgrade_containers.clear();
        self.upgrade_checkpoint_hazard.clear();
        for summary in summaries {
            for (verdict, count) in [
                ("restart", summary.restart),
                ("keep", summary.keep),
                ("unknown", summary.unknown),
                ("not_running", summary.not_running),
            ] {
                self.upgrade_containers
                    .get_or_create(&UpgradeLabels {
                        target: summary.release.clone(),
                        verdict,
                    })
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            self.upgrade_checkpoint_hazard
                .get_or_create(&UpgradeTargetLabels {
                    target: summary.release.clone(),
                })
                .set(i64::from(summary.checkpoint_hazard));
        }
    }

    pub(crate) fn observe_api_request(
        &self,
        verb: &str,
        resource: &str,
        code: u16,
        elapsed: Duration,
    ) {
        self.api_requests
            .get_or_create(&ApiCallLabels {
                verb: verb.to_owned(),
                resource: resource.to_owned(),
                code: code.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn count_watch_restart(&self, resource: &'static str) {
        self.watch_restarts
            .get_or_create(&WatchLabels { resource })
            .inc();
    }

    pub(crate) fn observe_restart_phase(
        &self,
        trigger: Trigger,
        phase: RestartPhase,
        seconds: f64,
    ) {
        self.restart_phases
            .get_or_create(&RestartPhaseLabels {
                trigger: trigger.as_str(),
                phase: phase.as_str(),
            })
            .observe(seconds);
    }

    pub(crate) fn observe_crr_reaction(&self, elapsed: Duration) {
        self.crr_reactions.observe(elapsed.as_secs_f64());
    }

    pub(crate) fn count_restart(&self, trigger: Trigger, result: RestartResult) {
        self.restarts
            .get_or_create(&RestartResultLabels {
                trigger: trigger.as_str(),
                result: result.as_str(),
            })
            .inc();
    }

    pub(crate) fn count_node_view_refresh(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.node_view_refreshes
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}

impl Metrics {
    pub(crate) fn count_env_restart(&self, result: EnvRestartResult) {
        self.env_restarts
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    pub(crate) fn count_runtime_meta_patch(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.runtime_meta_patches
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}

impl Metrics {
    /// A resize request ended; `seconds` is unknown for requests that ended before this agent
    /// took them up (e.g. refused at once after a restart): counted, not timed.
    pub(crate) fn observe_resize(
        &self,
        actuator: &'static str,
        result: &'static str,
        seconds: Option<f64>,
    ) {
        let labels = ResizeLabels { actuator, result };
        self.resizes.get_or_create(&labels).inc();
        if let Some(seconds) = seconds {
            self.resize_durations
                .get_or_create(&labels)
                .observe(seconds);
        }
    }

    pub(crate) fn count_resize_reapplied(&self) {
        self.resize_reapplies.inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl CallObserver for Metrics {
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        self.cri_requests
            .get_or_create(&CriCallLabels {
                method,
                code: format!("{code:?}"),
            })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_prefixed_families_and_bounded_labels() {
        let metrics = Metrics::new();
        metrics.observe("StopContainer", tonic::Code::Ok, Duration::from_millis(21));
        metrics.observe_api_request("list", "pods", 200, Duration::from_millis(3));
        metrics.count_watch_restart("pods");
        let text = metrics.encode();
        assert!(text.contains("inplaced_build_info{version=\""), "{text}");
        assert!(
            text.contains(
                "inplaced_cri_request_duration_seconds_bucket{le=\"0.032\",method=\"StopContainer\",code=\"Ok\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("inplaced_api_request_duration_seconds_count{verb=\"list\",resource=\"pods\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("inplaced_watch_restarts_total{resource=\"pods\"} 1"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics terminator");
    }
}

#[cfg(test)]
mod dashboard_tests {
    use super::*;

    #[test]
    fn outcome_counters_start_at_zero() {
        let text = Metrics::new().encode();
        for series in [
            "inplaced_env_restarts_total{result=\"error\"} 0",
            "inplaced_restarts_total{trigger=\"crr\",result=\"not-ready\"} 0",
            "inplaced_resizes_total{actuator=\"cri\",result=\"Failed\"} 0",
            "inplaced_node_view_refreshes_total{result=\"error\"} 0",
            "inplaced_runtime_meta_patches_total{result=\"error\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
    }

    /// Every metric a query of the shipped Grafana dashboard names must be one the agent exports.
    #[test]
    fn every_dashboard_query_names_an_exported_metric() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/packaging/grafana/inplaced-dashboard.json"
        );
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // Families are exposed once they have a sample: give every one of them one.
        let metrics = Metrics::new();
        metrics.observe("Version", tonic::Code::Ok, Duration::from_millis(1));
        metrics.observe_api_request("list", "pods", 200, Duration::from_millis(1));
        metrics.count_watch_restart("pods");
        metrics.count_node_view_refresh(true);
        metrics.observe_restart_phase(Trigger::Crr, RestartPhase::Total, 1.0);
        metrics.count_restart(Trigger::Crr, RestartResult::Ready);
        metrics.count_env_restart(EnvRestartResult::Success);
        metrics.count_runtime_meta_patch(true);
        metrics.observe_resize("cri", "Succeeded", Some(0.1));
        metrics.set_upgrade_summaries(&[crate::upgrade::TargetSummary {
            release: "1.34".into(),
            restart: 1,
            keep: 2,
            unknown: 0,
            not_running: 0,
            checkpoint_hazard: false,
            checkpoint_message: None,
            workloads: vec![],
            workloads_omitted: 0,
        }]);
        metrics.count_resize_reapplied();
        let exported: Vec<String> = metrics
            .encode()
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        assert!(exported.len() >= 8, "{exported:?}");
        let mut queries = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                queries.push(target["expr"].as_str().unwrap().to_owned());
            }
        }
        for variable in dashboard["templating"]["list"].as_array().unwrap() {
            if let Some(query) = variable["query"]
                .as_str()
                .filter(|q| q.contains("inplaced_"))
            {
                queries.push(query.to_owned());
            }
        }
        assert!(!queries.is_empty());
        for query in &queries {
            let mut named = 0;
            for (start, _) in query.match_indices("inplaced_") {
                let name: String = query[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // Samples of a family: name_bucket/_sum/_count of a histogram, name_total of a counter,
                // name_info of an info metric.
                let family = ["_bucket", "_sum", "_count", "_total", "_info"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(&name);
                assert!(
                    exported.iter().any(|e| e == family),
                    "{name} in {query:?} is not exported: {exported:?}"
                );
                named += 1;
            }
            assert!(named > 0, "a query without an inplaced metric: {query}");
        }
    }
}
