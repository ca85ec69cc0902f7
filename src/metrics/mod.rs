//! The agent's Prometheus registry: one `inplaced_` prefix, bounded labels only (methods, verbs,
//! resources, codes — never pod names or UIDs). This module names no capability: each module
//! declares its own families as a [`FamilySet`] and registers them here; the agent registers
//! them all at start (`agent::register_metrics`), so that every outcome series exists at 0
//! before the first event.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry};

mod labels;
pub(crate) use labels::label_values;

/// Explicit buckets from 5 ms to 10 min: a CRI stop takes milliseconds, a kubelet restart with
/// back-off or an image pull minutes.
const LONG_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];

/// For durations of work on containers (restarts, resizes): 5 ms .. 10 min.
pub(crate) fn long_histogram() -> Histogram {
    Histogram::new(LONG_BUCKETS)
}

/// For calls to the runtime or the API server: 1 ms .. 32 s (CRI calls take milliseconds, a
/// slow StopContainer or a watch list seconds).
pub(crate) fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The one `result` label of outcome counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// A module's metric families: registered once per registry, then shared by every clone.
pub(crate) trait FamilySet: Clone + Send + Sync + 'static {
    /// Creates the families and registers them (with their known series at 0).
    fn register(registry: &mut Registry) -> Self;
}

/// The agent's registry and the family sets registered in it. Cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    registry: Registry,
    sets: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
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
        Self {
            inner: Arc::new(Mutex::new(Inner {
                registry,
                sets: HashMap::new(),
            })),
        }
    }

    /// The families of `S`, registered on first use.
    pub(crate) fn families<S: FamilySet>(&self) -> S {
        let mut inner = self.lock();
        if let Some(set) = inner
            .sets
            .get(&TypeId::of::<S>())
            .and_then(|set| set.downcast_ref::<S>())
        {
            return set.clone();
        }
        let set = S::register(&mut inner.registry);
        inner.sets.insert(TypeId::of::<S>(), Box::new(set.clone()));
        set
    }

    /// OpenMetrics text exposition of everything registered.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.lock().registry);
        text
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The registry holds no invariant a panicking holder could break halfway.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Registers `metric` under `name` and hands it back (families are cheap clones of shared state).
pub(crate) fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[derive(Clone)]
    struct Probe(Counter);

    impl FamilySet for Probe {
        fn register(registry: &mut Registry) -> Self {
            Probe(registered(
                registry,
                "probe",
                "A test counter",
                Counter::default(),
            ))
        }
    }

    #[test]
    fn a_family_set_is_registered_once_and_shared() {
        let metrics = Metrics::new();
        metrics.families::<Probe>().0.inc();
        metrics.families::<Probe>().0.inc();
        let text = metrics.encode();
        assert!(text.contains("inplaced_build_info{version=\""), "{text}");
        assert_eq!(
            text.matches("# TYPE inplaced_probe counter").count(),
            1,
            "{text}"
        );
        assert!(text.contains("inplaced_probe_total 2"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics terminator");
    }
}
