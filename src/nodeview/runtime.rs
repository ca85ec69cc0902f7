//! What the runtime holds, listed through CRI. `ListContainers` has no start/finish times, so
//! `ContainerStatus` is asked once per container and state, and cached. A CRI object's fields
//! other than its state never change once it exists, so each is decoded in full once: a refresh
//! lists IDs and states through brief views and lists in full only when an unknown ID shows up.
//! A steady node costs two brief list calls per refresh.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cri::labels;
use crate::cri::proto::{Container, ImageSpec, PodSandbox};
use crate::cri::{CriClient, CriError, RuntimeInfo};

/// CRI's own timestamps of a container (unix nanoseconds; 0 = not yet).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerTimes {
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: Option<i32>,
}

#[derive(Clone, Debug, Default)]
pub struct RuntimeSnapshot {
    pub runtime: Option<RuntimeInfo>,
    /// Shared with the tracker's cache (and the previous snapshot) while unchanged.
    pub sandboxes: Vec<Arc<PodSandbox>>,
    pub containers: Vec<Arc<Container>>,
    /// By container ID.
    pub times: Arc<HashMap<String, ContainerTimes>>,
}

impl RuntimeSnapshot {
    /// Whether `other` shows the same runtime: the same sandboxes and containers in the same
    /// states, with the same times. A CRI object's labels, annotations and image never change
    /// once it exists, so its ID stands for them.
    pub fn same_as(&self, other: &RuntimeSnapshot) -> bool {
        self.runtime == other.runtime
            && self.times == other.times
            && self.sandboxes.len() == other.sandboxes.len()
            && self.containers.len() == other.containers.len()
            && self
                .sandboxes
                .iter()
                .zip(&other.sandboxes)
                .all(|(a, b)| a.id == b.id && a.state == b.state)
            && self
                .containers
                .iter()
                .zip(&other.containers)
                .all(|(a, b)| a.id == b.id && a.state == b.state)
    }
}

/// Lists the runtime and keeps the per-container status cache between refreshes.
pub struct RuntimeTracker {
    cri: CriClient,
    info: Option<RuntimeInfo>,
    /// Container ID → (state when asked, times).
    statuses: HashMap<String, (i32, ContainerTimes)>,
    /// `statuses` without the states, as handed out (rebuilt only when a status changes).
    times: Arc<HashMap<String, ContainerTimes>>,
    status_budget: usize,
    /// Every container and sandbox listed, by ID, as last listed in full (state kept current).
    containers: HashMap<String, Arc<Container>>,
    sandboxes: HashMap<String, Arc<PodSandbox>>,
}

/// Concurrent ContainerStatus calls when many containers are new (agent start).
const STATUS_CONCURRENCY: usize = 8;
/// ContainerStatus calls per refresh at most: at start, with hundreds of containers, the first
/// listing is published at once and the times follow over the next refreshes (those that matter
/// first: containers whose state changed, then the newest).
pub(crate) const STATUS_BUDGET: usize = 64;

impl RuntimeTracker {
    pub fn new(cri: CriClient) -> Self {
        Self {
            cri,
            info: None,
            statuses: HashMap::new(),
            times: Arc::default(),
            status_budget: STATUS_BUDGET,
            containers: HashMap::new(),
            sandboxes: HashMap::new(),
        }
    }

    /// At most `budget` ContainerStatus calls per refresh (default [`STATUS_BUDGET`]).
    pub fn with_status_budget(mut self, budget: usize) -> Self {
        self.status_budget = budget;
        self
    }

    pub fn client(&self) -> &CriClient {
        &self.cri
    }

    pub async fn refresh(&mut self) -> Result<RuntimeSnapshot, CriError> {
        let result = self.list().await;
        if result.is_err() {
            // The runtime may come back as another version (or another runtime): ask again.
            self.info = None;
        }
        result
    }

    async fn list(&mut self) -> Result<RuntimeSnapshot, CriError> {
        if self.info.is_none() {
            self.info = Some(self.cri.version().await?);
        }
        let briefs = self.cri.list_pod_sandbox_states().await?;
        let sandboxes = match known(&mut self.sandboxes, briefs.iter().map(|b| (&b.id, b.state))) {
            Some(listed) => listed,
            None => relisted(
                &mut self.sandboxes,
                self.cri.list_pod_sandboxes(None).await?,
            ),
        };
        let briefs = self.cri.list_container_states().await?;
        let containers = match known(
            &mut self.containers,
            briefs.iter().map(|b| (&b.id, b.state)),
        ) {
            Some(listed) => listed,
            None => relisted(&mut self.containers, self.cri.list_containers(None).await?),
        };

        let mut stale: Vec<&Arc<Container>> = containers
            .iter()
            .filter(|c| {
                self.statuses
                    .get(&c.id)
                    .is_none_or(|(state, _)| *state != c.state)
            })
            .collect();
        stale.sort_by_key(|c| {
            (
                !self.statuses.contains_key(&c.id),
                std::cmp::Reverse(c.created_at),
            )
        });
        let stale: Vec<(String, i32)> = stale
            .into_iter()
            .take(self.status_budget)
            .map(|c| (c.id.clone(), c.state))
            .collect();
        let fetched: Vec<(String, i32, Option<ContainerTimes>)> = futures::stream::iter(stale)
            .map(|(id, state)| {
                let cri = self.cri.clone();
                async move {
                    let times = match cri.container_status(&id, false).await {
                        Ok(response) => response.status.map(|s| ContainerTimes {
                            created_at: s.created_at,
                            started_at: s.started_at,
                            finished_at: s.finished_at,
                            exit_code: (s.finished_at > 0).then_some(s.exit_code),
                        }),
                        // Removed between the list and the status call: gone next refresh.
                        Err(err) if err.is_not_found() => None,
                        Err(err) => {
                            tracing::debug!(container = %id, error = %err, "ContainerStatus failed");
                            None
                        }
                    };
                    (id, state, times)
                }
            })
            .buffer_unordered(STATUS_CONCURRENCY)
            .collect()
            .await;
        let mut changed = false;
        for (id, state, times) in fetched {
            if let Some(times) = times {
                self.statuses.insert(id, (state, times));
                changed = true;
            }
        }
        let before = self.statuses.len();
        self.statuses
            .retain(|id, _| self.containers.contains_key(id));
        if changed || self.statuses.len() != before {
            self.times = Arc::new(
                self.statuses
                    .iter()
                    .map(|(id, (_, times))| (id.clone(), times.clone()))
                    .collect(),
            );
        }

        Ok(RuntimeSnapshot {
            runtime: self.info.clone(),
            sandboxes,
            times: self.times.clone(),
            containers,
        })
    }
}

/// A CRI object whose fields, once it exists, change only in its state.
trait RuntimeObject: Clone + PartialEq {
    fn id(&self) -> &str;
    fn state(&self) -> i32;
    fn state_mut(&mut self) -> &mut i32;
    /// Drops what the node view never reads, before the object is cached: kubelet's other
    /// annotations (preStop handler and ports JSON), a sandbox's copy of every pod label and
    /// annotation, image annotations. Cached objects are most of the agent's memory on a big
    /// node (BENCHMARKS.md); what a restarter needs beyond this it asks `ContainerStatus` for.
    fn trim(&mut self);
    /// What CRI requires of every listed object (metadata, a creation time). One without is
    /// a garbage answer: it is shown but not cached, so the next refresh lists in full again
    /// instead of keeping it until some new container appears.
    fn well_formed(&self) -> bool;
}

/// Keeps the entries of `map` whose keys are in `keep`, in as little memory as they need.
fn retain_keys(map: &mut HashMap<String, String>, keep: &[&str]) {
    map.retain(|key, _| keep.contains(&key.as_str()));
    map.shrink_to_fit();
}

/// Both kinds have `id`, `state`, `metadata` and `created_at` fields of the same types; what
/// is trimmed differs.
macro_rules! runtime_object {
    ($($kind:ty => $trim:path),*) => {$(
        impl RuntimeObject for $kind {
            fn id(&self) -> &str {
                &self.id
            }
            fn state(&self) -> i32 {
                self.state
            }
            fn state_mut(&mut self) -> &mut i32 {
                &mut self.state
            }
            fn well_formed(&self) -> bool {
                !self.id.is_empty() && self.metadata.is_some() && self.created_at > 0
            }
            fn trim(&mut self) {
                $trim(self)
            }
        }
    )*};
}
runtime_object!(Container => trim_container, PodSandbox => trim_sandbox);

fn trim_container(container: &mut Container) {
    retain_keys(
        &mut container.labels,
        &[
            labels::POD_UID,
            labels::POD_NAMESPACE,
            labels::POD_NAME,
            labels::CONTAINER_NAME,
        ],
    );
    retain_keys(
        &mut container.annotations,
        &[
            labels::CONTAINER_HASH,
            labels::CONTAINER_HASH_WITHOUT_RESOURCES,
            labels::CONTAINER_RESTART_COUNT,
        ],
    );
    if let Some(image) = container.image.as_mut() {
        *image = ImageSpec {
            image: std::mem::take(&mut image.image),
            ..Default::default()
        };
    }
    container.image_ref = String::new();
    container.image_id = String::new();
}

fn trim_sandbox(sandbox: &mut PodSandbox) {
    retain_keys(&mut sandbox.labels, &[labels::POD_UID]);
    sandbox.annotations = HashMap::new();
    sandbox.runtime_handler = String::new();
}

/// The objects a brief listing (ID, state) names, from `cache` with their states brought up to
/// date; `None` when it names an ID the cache lacks (a full listing is needed). Sorted by ID:
/// the runtime lists in no stable order (containerd: Go map order), and an unchanged runtime
/// must give an identical snapshot.
fn known<'a, T: RuntimeObject>(
    cache: &mut HashMap<String, Arc<T>>,
    briefs: impl Iterator<Item = (&'a String, i32)> + Clone,
) -> Option<Vec<Arc<T>>> {
    if briefs.clone().any(|(id, _)| !cache.contains_key(id)) {
        return None;
    }
    let mut listed: Vec<Arc<T>> = briefs
        .filter_map(|(id, state)| {
            let known = cache.get_mut(id)?;
            if known.state() != state {
                *Arc::make_mut(known).state_mut() = state;
            }
            Some(known.clone())
        })
        .collect();
    if listed.len() != cache.len() {
        *cache = listed
            .iter()
            .map(|o| (o.id().to_owned(), o.clone()))
            .collect();
    }
    listed.sort_unstable_by(|a, b| a.id().cmp(b.id()));
    Some(listed)
}

/// A full listing, which replaces `cache`; sorted by ID as [`known`] sorts. A cached object
/// the listing repeats exactly is kept (no new allocation); any difference replaces it, so a
/// garbage answer once cached is healed by the next full listing.
fn relisted<T: RuntimeObject>(cache: &mut HashMap<String, Arc<T>>, full: Vec<T>) -> Vec<Arc<T>> {
    let mut listed: Vec<Arc<T>> = full
        .into_iter()
        .map(|mut object| {
            object.trim();
            match cache.get(object.id()) {
                Some(known) if **known == object => known.clone(),
                _ => Arc::new(object),
            }
        })
        .collect();
    listed.sort_unstable_by(|a, b| a.id().cmp(b.id()));
    *cache = listed
        .iter()
        .filter(|o| o.well_formed())
        .map(|o| (o.id().to_owned(), o.clone()))
        .collect();
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(id: &str, uid: &str, created_at: i64) -> Container {
        Container {
            id: id.into(),
            created_at,
            metadata: Some(Default::default()),
            labels: [
                (labels::POD_UID.to_owned(), uid.to_owned()),
                (labels::CONTAINER_NAME.to_owned(), "app".to_owned()),
                (labels::POD_NAME.to_owned(), "p".to_owned()),
                ("app.kubernetes.io/name".to_owned(), "web".to_owned()),
            ]
            .into(),
            annotations: [
                (labels::CONTAINER_HASH.to_owned(), "1a2b3c".to_owned()),
                (
                    labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_owned(),
                    "/dev/termination-log".to_owned(),
                ),
            ]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_relisting_keeps_what_it_repeats_and_replaces_what_differs() {
        let mut cache = HashMap::new();
        // A garbage answer (labels and times mangled) is cached as listed, trimmed...
        let garbage = relisted(&mut cache, vec![container("a", "garbage", -1)]);
        assert_eq!(garbage[0].labels.get(labels::POD_UID).unwrap(), "garbage");
        assert!(!garbage[0].labels.contains_key("app.kubernetes.io/name"));
        assert_eq!(garbage[0].labels.get(labels::POD_NAME).unwrap(), "p");
        assert!(
            !garbage[0]
                .annotations
                .contains_key(labels::CONTAINER_TERMINATION_MESSAGE_PATH)
        );
        // ...not cached, so the next refresh lists in full again...
        let briefs = [("a".to_owned(), 0)];
        assert!(known(&mut cache, briefs.iter().map(|(id, state)| (id, *state))).is_none());
        // ...and healed by that full listing.
        let healed = relisted(
            &mut cache,
            vec![container("a", "u1", 7), container("b", "u1", 8)],
        );
        assert_eq!(healed[0].labels.get(labels::POD_UID).unwrap(), "u1");
        assert_eq!(healed[0].created_at, 7);
        assert_eq!(
            healed[0].annotations.get(labels::CONTAINER_HASH).unwrap(),
            "1a2b3c"
        );
        // An object listed again unchanged is the cached one.
        let again = relisted(
            &mut cache,
            vec![container("b", "u1", 8), container("a", "u1", 7)],
        );
        assert!(Arc::ptr_eq(&again[0], &healed[0]) && Arc::ptr_eq(&again[1], &healed[1]));
    }
}
