//! Core/v1 events about the pods this agent acts on (`Killing`, `FailedPreStopHook`, …), sent in
//! the background: recording an event never delays the action it reports.

use ::kube::Client;
use ::kube::api::{Api, PostParams};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// The pod an event is about.
#[derive(Clone, Debug)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Records events as this node's agent (`source.component` inplaced, `source.host` the node).
#[derive(Clone)]
pub struct PodEvents {
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
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())),
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
            message: Some(message),
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
            reporting_instance: Some(self.node.clone()),
            action: Some(reason.into()),
            ..Default::default()
        }
    }
}
