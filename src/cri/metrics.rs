//! CRI call latency: `inplaced_cri_request_duration_seconds{method,code}`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::CallObserver;
use crate::metrics::{FamilySet, registered, request_histogram};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CriCallLabels {
    method: &'static str,
    code: String,
}

/// The runtime client's families; a [`CallObserver`] for [`super::CriClient::with_observer`].
#[derive(Clone)]
pub struct CriCallMetrics {
    requests: Family<CriCallLabels, Histogram>,
}

impl FamilySet for CriCallMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            requests: registered(
                registry,
                "cri_request_duration_seconds",
                "Latency of CRI calls by method and gRPC code",
                Family::new_with_constructor(request_histogram as fn() -> Histogram),
            ),
        }
    }
}

impl CallObserver for CriCallMetrics {
    fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        self.requests
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
    use crate::metrics::Metrics;

    #[test]
    fn a_call_is_timed_by_method_and_code() {
        let metrics = Metrics::new();
        metrics.families::<CriCallMetrics>().observe(
            "StopContainer",
            tonic::Code::Ok,
            Duration::from_millis(21),
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                "inplaced_cri_request_duration_seconds_bucket{le=\"0.032\",method=\"StopContainer\",code=\"Ok\"} 1"
            ),
            "{text}"
        );
    }
}
