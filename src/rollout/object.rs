//! The ContainerRestartRollout (inplaced.io/v1alpha1) as the agents read and write it
//! (`packaging/kubernetes/crd-containerrestartrollouts.yaml`). The spec is the user's; the status
//! is written by the namespace's leading agent alone (the admission policy): the counts, and a
//! part for each node with something to say (its claims, its failures).

use ::kube::api::DynamicObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::requests::{self, Decoded, NoIdentity};
use crate::restartrequest::object::RestartStrategy;

pub(crate) const GROUP: &str = "inplaced.io";
pub(crate) const VERSION: &str = "v1alpha1";
pub(crate) const KIND: &str = "ContainerRestartRollout";
pub(crate) const PLURAL: &str = "containerrestartrollouts";
/// On the ContainerRestartRequests a rollout's agents make: the rollout's name.
pub(crate) const LABEL_ROLLOUT: &str = "inplaced.io/rollout";
/// On each agent's Lease (one per namespace it has rollout work in), for the census to list.
pub(crate) const LABEL_AGENT_LEASE: &str = "inplaced.io/agent-lease";
/// The Lease whose holder leads every rollout of its namespace: the one agent that writes
/// their status (the admission policy reads it as its param).
pub const LEADER_LEASE: &str = "inplaced-rollout-leader";

/// A failure message longer than this is cut (the status must stay small).
const MAX_MESSAGE: usize = 300;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    pub selector: LabelSelector,
    /// Empty: every app container of each pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<String>,
    /// A number of pods or a percentage of the matching pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RestartStrategy>,
    #[serde(default)]
    pub paused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// The rollout fails if it has not finished this long after its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// The rollout stops (phase Failed) once this many pods failed (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failed_pods: Option<u32>,
}

impl RolloutSpec {
    pub fn max_failed_pods(&self) -> u32 {
        self.failure_policy
            .as_ref()
            .and_then(|p| p.max_failed_pods)
            .unwrap_or(1)
            .max(1)
    }

    /// `maxUnavailable` of `total` pods: a percentage rounds down (as a Deployment's does) but
    /// never to nothing, or the rollout could not start.
    pub fn max_unavailable_of(&self, total: usize) -> usize {
        match &self.max_unavailable {
            None => 1,
            Some(IntOrString::Int(n)) => usize::try_from(*n).unwrap_or(0).max(1),
            Some(IntOrString::String(text)) => text
                .strip_suffix('%')
                .and_then(|p| p.parse::<usize>().ok())
                .map_or(1, |p| (total * p.min(100) / 100).max(1)),
        }
    }

    pub(crate) fn validate(self) -> Result<RolloutSpec, String> {
        check_selector(&self.selector).map_err(|e| format!("spec.selector: {e}"))?;
        if self
            .selector
            .match_labels
            .as_ref()
            .is_none_or(|m| m.is_empty())
            && self
                .selector
                .match_expressions
                .as_ref()
                .is_none_or(|m| m.is_empty())
        {
            return Err("spec.selector selects every pod: name the pods to restart".into());
        }
        match &self.max_unavailable {
            Some(IntOrString::Int(n)) if *n < 1 => {
                return Err(format!("spec.maxUnavailable {n}: must be at least 1"));
            }
            Some(IntOrString::String(text))
                if !text
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_some_and(|p| (1..=100).contains(&p)) =>
            {
                return Err(format!(
                    "spec.maxUnavailable {text:?}: neither a number nor a percentage from 1% to 100%"
                ));
            }
            _ => {}
        }
        if self.deadline_seconds.is_some_and(|d| d < 1) {
            return Err("spec.deadlineSeconds: must be at least 1".into());
        }
        Ok(self)
    }
}

/// The API's rules for a label selector: its operators, and keys and values of label syntax.
pub(crate) fn check_selector(selector: &LabelSelector) -> Result<(), String> {
    ::kube::core::Selector::try_from(selector.clone()).map_err(|e| e.to_string())?;
    let keys = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .chain(selector.match_expressions.iter().flatten().map(|e| &e.key));
    for key in keys {
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key.as_str()),
        };
        let prefix_ok = prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.split('.').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !part.starts_with('-')
                        && !part.ends_with('-')
                })
        });
        if !prefix_ok || name.is_empty() || !label_value(name) {
            return Err(format!("{key:?} is not a valid label key"));
        }
    }
    let values = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(_, v)| v)
        .chain(
            selector
                .match_expressions
                .iter()
                .flatten()
                .flat_map(|e| e.values.iter().flatten()),
        );
    for value in values {
        if !value.is_empty() && !label_value(value) {
            return Err(format!("{value:?} is not a valid label value"));
        }
    }
    Ok(())
}

/// At most 63 characters, alphanumeric at both ends, `-`, `_` and `.` between.
fn label_value(text: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.len() <= 63
        && alphanumeric(text.chars().next())
        && alphanumeric(text.chars().last())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RolloutPhase {
    #[default]
    #[serde(rename = "")]
    None,
    Progressing,
    Paused,
    Succeeded,
    Failed,
}

impl RolloutPhase {
    fn is_none(&self) -> bool {
        *self == RolloutPhase::None
    }

    pub fn is_final(self) -> bool {
        matches!(self, RolloutPhase::Succeeded | RolloutPhase::Failed)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "RolloutPhase::is_none")]
    pub phase: RolloutPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Pods that match the selector and existed at this time are the rollout's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// The rollout's pods, as last counted over every node.
    #[serde(default)]
    pub matched: u32,
    #[serde(default)]
    pub done: u32,
    #[serde(default)]
    pub failed: u32,
    #[serde(default)]
    pub in_progress: u32,
    /// Matching pods created after the start: not restarted by this rollout.
    #[serde(default)]
    pub not_included: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// On the wire a map from node name to part, so that the admission policy finds a node's
    /// part by its key rather than by a scan of every part (its cost grows with the nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "parts_by_node")]
    pub nodes: Vec<NodePart>,
}

/// `status.nodes` as the API has it, `{node: part}`, read into parts in node order.
mod parts_by_node {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::NodePart;

    pub fn serialize<S: Serializer>(parts: &[NodePart], serializer: S) -> Result<S::Ok, S::Error> {
        let by_node: BTreeMap<&str, &NodePart> =
            parts.iter().map(|p| (p.node.as_str(), p)).collect();
        by_node.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<NodePart>, D::Error> {
        let by_node = BTreeMap::<String, NodePart>::deserialize(deserializer)?;
        Ok(by_node
            .into_iter()
            .map(|(node, part)| NodePart { node, ..part })
            .collect())
    }
}

/// One node's part: what the rollout has to say of that node beyond the counts (its claims,
/// its failures, its skipped pods, why it waits). Written by the namespace's leading agent
/// only; a node with nothing to say has no part, for every write goes to every agent's watch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePart {
    /// The key of the part in `status.nodes`.
    #[serde(skip)]
    pub node: String,
    /// Pods being restarted: each holds one unit of the budget until it is ready again. The
    /// node's agent makes each one's ContainerRestartRequest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
    /// The pods that failed to restart, with why (the failure policy bounds them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<Failure>,
    /// Pods deleted or replaced while restarted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u32,
    /// Why this node's pods left wait, when it is not the rollout's budget being in use (a
    /// PodDisruptionBudget, unready pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub pod: String,
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    pub since: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub pod: String,
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    pub message: String,
}

impl Failure {
    pub fn new(pod: &str, pod_uid: &str, message: &str) -> Failure {
        let mut message = message.to_string();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        Failure {
            pod: pod.into(),
            pod_uid: pod_uid.into(),
            message,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub last_transition_time: String,
}

impl RolloutStatus {
    pub fn part(&self, node: &str) -> Option<&NodePart> {
        self.nodes.iter().find(|p| p.node == node)
    }

    pub fn start(&self) -> Option<Timestamp> {
        self.start_time.as_deref().and_then(|t| t.parse().ok())
    }

    /// Every claim of every node: the budget they hold.
    pub fn claims(&self) -> impl Iterator<Item = (&str, &Claim)> {
        self.nodes
            .iter()
            .flat_map(|p| p.claims.iter().map(move |c| (p.node.as_str(), c)))
    }
}

pub type Rollout = Decoded<RolloutSpec, RolloutStatus>;

/// Decodes a rollout; `Err` only without identity (the watch guarantees it).
pub fn decode(object: &DynamicObject) -> Result<Rollout, NoIdentity> {
    requests::decode(object, RolloutSpec::validate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> Result<RolloutSpec, String> {
        serde_json::from_value::<RolloutSpec>(value)
            .map_err(|e| e.to_string())
            .and_then(RolloutSpec::validate)
    }

    #[test]
    fn a_spec_needs_a_selector_that_names_pods_and_a_sane_budget() {
        let ok = spec(json!({"selector": {"matchLabels": {"app": "web"}}})).unwrap();
        assert_eq!(ok.max_unavailable_of(10), 1);
        assert_eq!(ok.max_failed_pods(), 1);
        let err = spec(json!({"selector": {}})).unwrap_err();
        assert!(err.contains("selects every pod"), "{err}");
        assert!(spec(json!({})).is_err(), "the selector is required");
        for bad in [json!(0), json!("0%"), json!("101%"), json!("x")] {
            let err = spec(json!({"selector": {"matchLabels": {"a": "b"}}, "maxUnavailable": bad}))
                .unwrap_err();
            assert!(err.contains("spec.maxUnavailable"), "{err}");
        }
        let bad_expression = spec(json!({"selector": {"matchExpressions": [
            {"key": "a", "operator": "Sideways", "values": ["b"]}]}}));
        assert!(bad_expression.unwrap_err().contains("spec.selector"));
        for (key, value) in [
            ("a b", "c"),
            ("a", "c d"),
            ("-a", "c"),
            ("Ex.com/a", "c"),
            ("x/", "c"),
        ] {
            let err = spec(json!({"selector": {"matchLabels": {key: value}}})).unwrap_err();
            assert!(err.starts_with("spec.selector: "), "{key}={value}: {err}");
        }
        assert!(
            spec(
                json!({"selector": {"matchLabels": {"example.com/app-name": "web_1.2", "e": ""}}})
            )
            .is_ok()
        );
    }

    #[test]
    fn max_unavailable_scales_like_a_deployment() {
        let with = |v: serde_json::Value| {
            spec(json!({"selector": {"matchLabels": {"a": "b"}}, "maxUnavailable": v})).unwrap()
        };
        assert_eq!(with(json!("10%")).max_unavailable_of(100), 10);
        assert_eq!(with(json!("10%")).max_unavailable_of(19), 1);
        assert_eq!(with(json!("10%")).max_unavailable_of(5), 1, "never nothing");
        assert_eq!(with(json!(3)).max_unavailable_of(2), 3);
    }

    #[test]
    fn a_long_failure_message_is_cut_on_a_character_boundary() {
        let long = "é".repeat(400);
        let failure = Failure::new("p", "u", &long);
        assert!(failure.message.len() <= MAX_MESSAGE + '…'.len_utf8());
        assert!(failure.message.ends_with('…'));
    }

    #[test]
    fn the_status_written_matches_the_crd_schema() {
        let status = RolloutStatus {
            observed_generation: Some(2),
            phase: RolloutPhase::Progressing,
            message: Some("m".into()),
            start_time: Some("2026-11-29T08:00:00Z".into()),
            completion_time: None,
            matched: 3,
            done: 1,
            failed: 1,
            in_progress: 1,
            not_included: 1,
            conditions: vec![Condition {
                type_: "Complete".into(),
                status: "False".into(),
                reason: "Progressing".into(),
                message: "m".into(),
                last_transition_time: "2026-11-29T08:00:00Z".into(),
            }],
            nodes: vec![NodePart {
                node: "n".into(),
                claims: vec![Claim {
                    pod: "p".into(),
                    pod_uid: "u".into(),
                    since: "2026-11-29T08:00:00Z".into(),
                }],
                failures: vec![Failure::new("q", "u3", "boom")],
                skipped: 1,
                waiting: Some("w".into()),
            }],
        };
        let schema = requests::crd_status_schema(include_str!(
            "../../packaging/kubernetes/crd-containerrestartrollouts.yaml"
        ));
        let written = serde_json::to_value(&status).unwrap();
        let violations = requests::schema_violations(&written, &schema, "status");
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn the_parts_are_a_map_by_node_name_on_the_wire() {
        // A part as agents before the leader wrote it (with counts) is read too.
        let status: RolloutStatus = serde_json::from_value(json!({"nodes": {
            "n2": {"skipped": 1, "matched": 1, "pending": 1},
            "n1": {"skipped": 2, "done": 2},
        }}))
        .unwrap();
        let nodes: Vec<(&str, u32)> = status
            .nodes
            .iter()
            .map(|p| (p.node.as_str(), p.skipped))
            .collect();
        assert_eq!(nodes, [("n1", 2), ("n2", 1)], "in node order");
        let written = serde_json::to_value(&status).unwrap();
        assert_eq!(written["nodes"]["n1"], json!({"skipped": 2}));
        assert!(
            written["nodes"]["n1"].get("node").is_none(),
            "the key names it"
        );
        let bad = serde_json::from_value::<RolloutStatus>(json!({"nodes": [{"node": "n1"}]}));
        assert!(bad.is_err(), "a list of parts is not read");
    }
}
