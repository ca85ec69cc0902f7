//! Core/v1 events about the pods this agent acts on (`Killing`, `FailedPreStopHook`, …), sent in
//! the background: recording an event never delays the action it reports.

use ::kube::Client;
use ::kube::api::{Api, PostParams};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// The API server refuses an event with `eventTime` whose message is longer (a preStop hook's
/// whole output would be): it is cut to fit instead.
const MAX_MESSAGE_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes on a character boundary, marked with `…` when cut.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

/// The pod an event is about.
#[derive(Clone, Debug)]
pub(crate) struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Records events as this node's agent (`source.component` inplaced, `source.host` the node).
#[derive(Clone)]
pub(crate) struct PodEvents {
    client: Client,
    node: String,
}

impl PodEvents {
    pub fn new(client: Client, node: &str) -> Self {
        Self {
            client,
            node: node.to_owned(),
        }
    }

    /// Sends the event from a background task; a failure is logged, never returned.
    pub fn emit(&self, pod: &PodRef, reason: &str, message: String, kind: &str) {
        let event = self.event(pod, reason, message, kind);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let reason = reason.to_owned();
        tokio::spawn(async move {
            if let Err(err) = api.create(&PostParams::default(), &event).await {
                tracing::warn!(reason, error = %err, "cannot record an event");
            }
        });
    }

    fn event(&self, pod: &PodRef, reason: &str, message: String, kind: &str) -> Event {
        let now = Timestamp::now();
        // The name's suffix (at most 16 hex digits) after a pod name cut to fit 253 characters.
        let name = format!("{}.{:x}", cut(&pod.name, 253 - 17), now.as_nanosecond());
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(pod.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: Some(pod.uid.clone()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(cut(&message, MAX_MESSAGE_BYTES).into_owned()),
            type_: Some(kind.into()),
            source: Some(EventSource {
                component: Some("inplaced".into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            reporting_component: Some("inplaced".into()),
            reporting_instance: Some(cut(&self.node, 128).into_owned()),
            action: Some(reason.into()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_cuts_long_text_on_a_character_boundary() {
        assert_eq!(cut("short", 10), "short");
        let long = "é".repeat(600);
        let cut_text = cut(&long, MAX_MESSAGE_BYTES);
        assert!(cut_text.len() <= MAX_MESSAGE_BYTES, "{}", cut_text.len());
        assert!(cut_text.ends_with('…'));
        assert!(cut_text.starts_with("éé"));
        let name = "p".repeat(253);
        let event_name = format!("{}.{:x}", cut(&name, 253 - 17), u64::MAX);
        assert!(event_name.len() <= 253, "{}", event_name.len());
    }
}
