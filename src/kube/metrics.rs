//! API server traffic: `inplaced_api_request_duration_seconds{verb,resource,code}` and
//! `inplaced_watch_restarts_total{resource}`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, registered, request_histogram};

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

#[derive(Clone)]
pub(crate) struct ApiMetrics {
    requests: Family<ApiCallLabels, Histogram>,
    watch_restarts: Family<WatchLabels, Counter>,
}

impl FamilySet for ApiMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            requests: registered(
                registry,
                "api_request_duration_seconds",
                "Latency of Kubernetes API requests by verb, resource and HTTP code (watches: until the response starts)",
                Family::new_with_constructor(request_histogram as fn() -> Histogram),
            ),
            watch_restarts: registered(
                registry,
                "watch_restarts",
                "Kubernetes watches that ended with an error and were restarted, by resource",
                Family::default(),
            ),
        }
    }
}

impl ApiMetrics {
    pub(crate) fn observe_request(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        self.requests
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn requests_and_watch_restarts_are_exported_with_bounded_labels() {
        let metrics = Metrics::new();
        let api = metrics.families::<ApiMetrics>();
        api.observe_request("list", "pods", 200, Duration::from_millis(3));
        api.count_watch_restart("pods");
        let text = metrics.encode();
        assert!(
            text.contains("inplaced_api_request_duration_seconds_count{verb=\"list\",resource=\"pods\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("inplaced_watch_restarts_total{resource=\"pods\"} 1"),
            "{text}"
        );
    }
}
