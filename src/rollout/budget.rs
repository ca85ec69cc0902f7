//! What a PodDisruptionBudget allows, computed from its spec and the pods' Ready conditions as
//! the disruption controller computes it for pods without a scalable owner: both the client-side
//! batches of `inplaced restart` and the agents' rollout claims are held to it.

use std::collections::{BTreeMap, HashSet};

use ::kube::core::{Selector, SelectorExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One pod as a batch decision sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodState {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub ready: bool,
}

impl PodState {
    pub fn of(pod: &Pod) -> PodState {
        PodState {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            ready: pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
        }
    }
}

/// Why a PodDisruptionBudget cannot be read or applied. The messages are written to rollouts'
/// status (`waiting`), so their wording is kept.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("PodDisruptionBudget {name}: its selector: {source}")]
    Selector {
        name: String,
        source: ::kube::core::ParseExpressionError,
    },
    #[error("PodDisruptionBudget {name}: negative")]
    Negative { name: String, value: i32 },
    #[error("PodDisruptionBudget {name}: {text:?} is not a number or a percentage")]
    NotANumber { name: String, text: String },
}

/// A PodDisruptionBudget, read for what it allows.
#[derive(Clone, Debug)]
pub struct Budget {
    pub name: String,
    selector: Selector,
    min_available: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
}

impl Budget {
    pub fn of(pdb: &PodDisruptionBudget) -> Result<Budget, BudgetError> {
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let spec = pdb.spec.clone().unwrap_or_default();
        // policy/v1: an empty or absent selector selects every pod of the namespace.
        let selector = match Selector::try_from(spec.selector.unwrap_or_default()) {
            Ok(selector) => selector,
            Err(source) => return Err(BudgetError::Selector { name, source }),
        };
        Ok(Budget {
            name,
            selector,
            min_available: spec.min_available,
            max_unavailable: spec.max_unavailable,
        })
    }

    pub fn covers(&self, pod: &PodState) -> bool {
        self.selector.matches(&pod.labels)
    }

    /// (healthy, required) among the namespace's `pods`; a pod being restarted is not healthy.
    pub fn healthy_and_required(
        &self,
        pods: &[PodState],
        busy: &HashSet<&str>,
    ) -> Result<(usize, usize), BudgetError> {
        let covered: Vec<&PodState> = pods.iter().filter(|p| self.covers(p)).collect();
        let expected = covered.len();
        let healthy = covered
            .iter()
            .filter(|p| p.ready && !busy.contains(p.uid.as_str()))
            .count();
        let name = || self.name.clone();
        let scaled = |value: &IntOrString| match value {
            IntOrString::Int(n) => usize::try_from(*n).map_err(|_| BudgetError::Negative {
                name: name(),
                value: *n,
            }),
            IntOrString::String(text) => text
                .strip_suffix('%')
                .and_then(|p| p.parse::<usize>().ok())
                // Rounded up, as the disruption controller scales both fields.
                .map(|p| (p * expected).div_ceil(100))
                .ok_or_else(|| BudgetError::NotANumber {
                    name: name(),
                    text: text.clone(),
                }),
        };
        let required = match (&self.min_available, &self.max_unavailable) {
            (Some(min), _) => scaled(min)?,
            (None, Some(max)) => expected.saturating_sub(scaled(max)?),
            (None, None) => 0,
        };
        Ok((healthy, required))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn budget(min_available: IntOrString) -> Budget {
        Budget::of(&PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(min_available),
                ..Default::default()
            }),
            ..Default::default()
        })
        .expect("an absent selector reads")
    }

    /// The words rollouts write to their status when a budget cannot be applied.
    #[test]
    fn a_budget_that_cannot_be_applied_says_so_in_the_same_words() {
        let busy = HashSet::new();
        let err = budget(IntOrString::Int(-1))
            .healthy_and_required(&[], &busy)
            .unwrap_err();
        assert_eq!(err.to_string(), "PodDisruptionBudget web: negative");
        let err = budget(IntOrString::String("half".into()))
            .healthy_and_required(&[], &busy)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "PodDisruptionBudget web: \"half\" is not a number or a percentage"
        );
        assert_eq!(
            budget(IntOrString::String("50%".into()))
                .healthy_and_required(&[], &busy)
                .unwrap(),
            (0, 0)
        );
    }
}
