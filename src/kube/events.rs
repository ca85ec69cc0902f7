//! Core/v1 events about the pods this agent acts on (`Killing`, `FailedPreStopHook`, …), sent in
//! the background: recording an event never delays the action it reports.
//!
//! Repeats are aggregated as the kubelet's event correlator does with core/v1 events: an event
//! equal to one sent within [`SERIES_WINDOW`] (same pod, reason, type and message) patches that
//! event's `count` and `lastTimestamp` instead of creating another; and from the
//! [`SIMILAR_EVENTS`]th different message of the same pod, reason and type within the window on,
//! they are counted into one event "(combined from similar events): <latest message>". A request
//! that fails over and over shows as one event "(x12 over 10m)", not twelve.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use ::kube::Client;
use ::kube::api::{Api, Patch, PatchParams, PostParams};
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

/// How long after an event a repeat of it is counted into it (the kubelet's event correlator
/// aggregates over ten minutes too).
const SERIES_WINDOW: Duration = Duration::from_secs(600);

/// Series remembered at most; past that, those whose window has passed are forgotten.
const SERIES_KEPT: usize = 4096;

/// From this many different messages of one pod, reason and type within the window, they are
/// one combined event (the kubelet's `maxEvents`).
const SIMILAR_EVENTS: usize = 10;

/// The pod (by UID), reason and type of an event: what makes events similar.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SimilarKey {
    namespace: String,
    uid: String,
    name: String,
    reason: String,
    kind: String,
}

/// What makes two events one series: similar, and the same message (None: the combined event
/// of similar ones).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    similar: SimilarKey,
    message: Option<String>,
}

/// The different messages of similar events within the window.
struct Similar {
    messages: std::collections::HashSet<String>,
    last: Instant,
}

static SIMILAR: LazyLock<Mutex<HashMap<SimilarKey, Similar>>> = LazyLock::new(Default::default);

/// The series an event belongs to and the message it is sent with: its own, or from the
/// [`SIMILAR_EVENTS`]th different message on, the combined event's.
fn correlate(similar: SimilarKey, message: String) -> (SeriesKey, String) {
    let now = Instant::now();
    let mut all = SIMILAR.lock().unwrap_or_else(|e| e.into_inner());
    if all.len() >= SERIES_KEPT {
        all.retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
    }
    let record = all.entry(similar.clone()).or_insert_with(|| Similar {
        messages: Default::default(),
        last: now,
    });
    if now.duration_since(record.last) >= SERIES_WINDOW {
        record.messages.clear();
    }
    record.last = now;
    // Only whether the threshold is reached matters: the set stays bounded however long a
    // request keeps failing with new messages (the kubelet pops one key for the same reason).
    if record.messages.len() < SIMILAR_EVENTS {
        record.messages.insert(message.clone());
    }
    if record.messages.len() < SIMILAR_EVENTS {
        let key = SeriesKey {
            similar,
            message: Some(message.clone()),
        };
        return (key, message);
    }
    let key = SeriesKey {
        similar,
        message: None,
    };
    (key, format!("(combined from similar events): {message}"))
}

/// The event a series was recorded as, once created.
#[derive(Default)]
struct Series {
    /// The event's name; None until its creation succeeded.
    event: Option<String>,
    count: i32,
    last: Option<Instant>,
}

/// The series this process recorded, shared by every [`PodEvents`]: the agent is one reporter
/// (`inplaced` on its node) whichever controller reports. Each series has its own async lock,
/// so a repeat waits for the creation of the event it is counted into.
static SERIES: LazyLock<Mutex<HashMap<SeriesKey, Arc<tokio::sync::Mutex<Series>>>>> =
    LazyLock::new(Default::default);

fn series_of(key: SeriesKey) -> Arc<tokio::sync::Mutex<Series>> {
    let mut all = SERIES.lock().unwrap_or_else(|e| e.into_inner());
    if all.len() >= SERIES_KEPT {
        // A series in use is locked or recent; one idle for a window is done.
        all.retain(|_, series| {
            series.try_lock().map_or(true, |s| {
                s.last.is_some_and(|t| t.elapsed() < SERIES_WINDOW)
            })
        });
    }
    all.entry(key).or_default().clone()
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

    /// Sends the event from a background task, or counts it into the series it repeats; a
    /// failure is logged, never returned.
    pub fn emit(&self, pod: &PodRef, reason: &str, message: String, kind: &str) {
        let similar = SimilarKey {
            namespace: pod.namespace.clone(),
            uid: pod.uid.clone(),
            name: pod.name.clone(),
            reason: reason.to_owned(),
            kind: kind.to_owned(),
        };
        let (key, message) = correlate(similar, message);
        let series = series_of(key);
        let event = self.event(pod, reason, message, kind);
        let api: Api<Event> = Api::namespaced(self.client.clone(), &pod.namespace);
        let reason = reason.to_owned();
        tokio::spawn(async move {
            let mut series = series.lock().await;
            if let Err(err) = record(&api, &mut series, event).await {
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

/// Creates `event`, or patches the event of `series` when it repeats one within the window
/// (a new one when that event is gone: the API server keeps events an hour by default).
async fn record(api: &Api<Event>, series: &mut Series, event: Event) -> Result<(), ::kube::Error> {
    let now = Instant::now();
    let repeat = series
        .last
        .is_some_and(|last| now.duration_since(last) < SERIES_WINDOW);
    if let (true, Some(name)) = (repeat, series.event.clone()) {
        let count = series.count.saturating_add(1);
        let patch = serde_json::json!({
            "count": count,
            "lastTimestamp": event.last_timestamp,
            "message": event.message,
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                series.count = count;
                series.last = Some(now);
                return Ok(());
            }
            Err(::kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(err),
        }
    }
    let created = api.create(&PostParams::default(), &event).await?;
    *series = Series {
        event: created.metadata.name,
        count: 1,
        last: Some(now),
    };
    Ok(())
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

#[cfg(test)]
mod series_tests {
    use super::*;

    async fn events_of(server: &apiserver_double::ApiServer, uid: &str) -> Vec<serde_json::Value> {
        server
            .store()
            .list("events", "default")
            .into_iter()
            .filter(|e| e.pointer("/involvedObject/uid").and_then(|u| u.as_str()) == Some(uid))
            .collect()
    }

    /// Against the API double: five equal `FailedPreStopHook` of one pod are one event counted
    /// five times; another reason is its own event; different messages are events of their own
    /// up to nine, and from the tenth on one combined event with the latest message; a series
    /// whose event is gone starts a new event.
    #[tokio::test]
    async fn repeats_about_one_pod_are_counted_into_one_event_as_the_kubelet_does() {
        let server = apiserver_double::ApiServer::start(Default::default())
            .await
            .expect("api server starts");
        let client = node_sandbox::util::kube_client(&server.kubeconfig(None))
            .await
            .expect("client builds");
        let uid = format!("uid-{:x}", rand::random::<u64>());
        let pod = PodRef {
            namespace: "default".into(),
            name: "web-0".into(),
            uid: uid.clone(),
        };
        let events = PodEvents::new(client, "node-1");
        let settle = || async {
            // Background sends; each series is serialized, so the last one seen means all are.
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        for _ in 1..=5 {
            events.emit(&pod, "FailedPreStopHook", "exit 1".into(), "Warning");
        }
        events.emit(&pod, "Killing", "stopping app".into(), "Normal");
        settle().await;
        let of_reason = |all: &[serde_json::Value], reason: &str| -> Vec<serde_json::Value> {
            all.iter()
                .filter(|e| e["reason"] == reason)
                .cloned()
                .collect()
        };
        let recorded = events_of(&server, &uid).await;
        assert_eq!(recorded.len(), 2, "{recorded:#?}");
        let failed = of_reason(&recorded, "FailedPreStopHook");
        assert_eq!(failed[0]["count"], 5, "{failed:#?}");
        assert_eq!(failed[0]["message"], "exit 1");
        assert!(failed[0]["lastTimestamp"].as_str() >= failed[0]["firstTimestamp"].as_str());
        assert_eq!(of_reason(&recorded, "Killing")[0]["count"], 1);

        // Twelve different messages: the first one is the counted event above (one message),
        // eight more are events of their own, the rest one combined event.
        for attempt in 2..=13 {
            events.emit(
                &pod,
                "FailedPreStopHook",
                format!("exit {attempt}"),
                "Warning",
            );
        }
        settle().await;
        let failed = of_reason(&events_of(&server, &uid).await, "FailedPreStopHook");
        assert_eq!(failed.len(), 10, "{failed:#?}");
        let combined: Vec<&serde_json::Value> = failed
            .iter()
            .filter(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("(combined"))
            })
            .collect();
        assert_eq!(combined.len(), 1, "{failed:#?}");
        assert_eq!(combined[0]["count"], 4);
        assert_eq!(
            combined[0]["message"],
            "(combined from similar events): exit 13"
        );
        let combined_name = combined[0]["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();

        server
            .store()
            .delete("events", "default", &combined_name)
            .expect("deleted");
        events.emit(&pod, "FailedPreStopHook", "exit 14".into(), "Warning");
        settle().await;
        let again: Vec<serde_json::Value> =
            of_reason(&events_of(&server, &uid).await, "FailedPreStopHook")
                .into_iter()
                .filter(|e| {
                    e["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("(combined"))
                })
                .collect();
        assert_eq!(again.len(), 1, "{again:#?}");
        assert_eq!(again[0]["count"], 1);
        assert_eq!(
            again[0]["message"],
            "(combined from similar events): exit 14"
        );
    }
}
