//! In-place restart timing: `inplaced_restart_duration_seconds{trigger,phase}` and
//! `inplaced_restarts_total{trigger,result}`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, label_values, long_histogram, registered};
use crate::nodeview::Trigger;

label_values! {
    /// A phase of an in-place restart (`inplaced_restart_duration_seconds{phase}`).
    RestartPhase {
        Stop => "stop",
        Restart => "restart",
        // The part of `restart` the kubelet spent in its crash back-off (predicted).
        Backoff => "backoff",
        Ready => "ready",
        Total => "total",
    }
}

label_values! {
    /// How an in-place restart ended (`inplaced_restarts_total{result}`).
    RestartResult {
        Ready => "ready",
        NotReady => "not-ready",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    trigger: &'static str,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    trigger: &'static str,
    result: &'static str,
}

#[derive(Clone)]
pub(crate) struct RestartMetrics {
    phases: Family<PhaseLabels, Histogram>,
    results: Family<ResultLabels, Counter>,
}

impl FamilySet for RestartMetrics {
    fn register(registry: &mut Registry) -> Self {
        let set = Self {
            phases: registered(
                registry,
                "restart_duration_seconds",
                "In-place restarts by trigger and phase (stop, restart, ready, total), from CRI timestamps",
                Family::new_with_constructor(long_histogram as fn() -> Histogram),
            ),
            results: registered(
                registry,
                "restarts",
                "In-place restarts by trigger and result (ready, not-ready)",
                Family::default(),
            ),
        };
        // Known outcomes exist at 0 from the start: the first failure after an agent restart is
        // an increase that rate() and alerts see.
        for trigger in Trigger::ALL {
            for result in RestartResult::ALL {
                drop(set.results.get_or_create(&ResultLabels {
                    trigger: trigger.as_str(),
                    result: result.as_str(),
                }));
            }
        }
        set
    }
}

impl RestartMetrics {
    pub(crate) fn observe_phase(&self, trigger: Trigger, phase: RestartPhase, seconds: f64) {
        self.phases
            .get_or_create(&PhaseLabels {
                trigger: trigger.as_str(),
                phase: phase.as_str(),
            })
            .observe(seconds);
    }

    pub(crate) fn count(&self, trigger: Trigger, result: RestartResult) {
        self.results
            .get_or_create(&ResultLabels {
                trigger: trigger.as_str(),
                result: result.as_str(),
            })
            .inc();
    }
}
