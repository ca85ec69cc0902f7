//! `inplaced_env_restarts_total{result}` and `inplaced_runtime_meta_patches_total{result}`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::metrics::{FamilySet, ResultLabels, label_values, registered};

label_values! {
    /// How an env-from-metadata restart ended (`inplaced_env_restarts_total{result}`).
    EnvRestartResult {
        Success => "success",
        Error => "error",
        Unmatched => "unmatched",
        NotRestartable => "not_restartable",
    }
}

#[derive(Clone)]
pub(crate) struct ContainerMetaMetrics {
    env_restarts: Family<ResultLabels, Counter>,
    annotation_patches: Family<ResultLabels, Counter>,
}

impl FamilySet for ContainerMetaMetrics {
    fn register(registry: &mut Registry) -> Self {
        let set = Self {
            env_restarts: registered(
                registry,
                "env_restarts",
                "Env-from-metadata restarts by result (success, error, unmatched: the restarted container still did not match and is left alone, not_restartable: the pod's restartPolicy is not Always or it is a static pod)",
                Family::default(),
            ),
            annotation_patches: registered(
                registry,
                "runtime_meta_patches",
                "Writes of the apps.kruise.io/runtime-containers-meta pod annotation by result",
                Family::default(),
            ),
        };
        // Every outcome exists at 0 from the start (a first error is an increase alerts see).
        for result in EnvRestartResult::ALL {
            drop(set.env_restarts.get_or_create(&ResultLabels {
                result: result.as_str(),
            }));
        }
        for result in ["success", "error"] {
            drop(
                set.annotation_patches
                    .get_or_create(&ResultLabels { result }),
            );
        }
        set
    }
}

impl ContainerMetaMetrics {
    pub(crate) fn count_env_restart(&self, result: EnvRestartResult) {
        self.env_restarts
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    pub(crate) fn count_annotation_patch(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.annotation_patches
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}
