//! Fault injection: error answers, delays, dropped or stalled watches, and outages.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::audit::RequestInfo;
use crate::error::ApiError;

/// Which requests a fault applies to; unset fields match anything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMatch {
    pub verb: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub user: Option<String>,
}

impl RequestMatch {
    pub fn any() -> Self {
        Self::default()
    }
    pub fn verb(mut self, v: &str) -> Self {
        self.verb = Some(v.into());
        self
    }
    /// Plural resource name, e.g. `pods` or `containerresizerequests`.
    pub fn resource(mut self, r: &str) -> Self {
        self.resource = Some(r.into());
        self
    }
    /// `""` matches only requests to the main resource.
    pub fn subresource(mut self, s: &str) -> Self {
        self.subresource = Some(s.into());
        self
    }
    pub fn namespace(mut self, n: &str) -> Self {
        self.namespace = Some(n.into());
        self
    }
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
    pub fn user(mut self, u: &str) -> Self {
        self.user = Some(u.into());
        self
    }

    fn matches(&self, r: &RequestInfo) -> bool {
        let m = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        m(&self.verb, &r.verb)
            && m(&self.resource, &r.resource)
            && m(&self.subresource, &r.subresource)
            && m(&self.namespace, &r.namespace)
            && m(&self.name, &r.name)
            && m(&self.user, &r.user)
    }
}

/// What a fault does to a matching request.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this HTTP code and a matching `Status` (e.g. 410, 403, 429, 500, 503).
    Respond {
        code: u16,
        message: Option<String>,
        /// `Retry-After` seconds (429 and 503 get 1 by default).
        retry_after: Option<u64>,
    },
    /// Wait, then handle the request normally.
    Delay(Duration),
    /// For watches: end the stream cleanly after this many events.
    DropWatch { after_events: usize },
    /// For watches: send headers, then nothing (no events, no bookmarks) for this long.
    StallWatch(Duration),
}

/// A fault rule. Build with [`Fault::respond`] and friends, narrow with [`Fault::on`].
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub matcher: RequestMatch,
    pub action: FaultAction,
    /// Fire at most this many times (`None`: until removed).
    pub times: Option<u32>,
    /// Let this many matching requests through first.
    pub skip: u32,
}

impl Fault {
    fn new(action: FaultAction) -> Self {
        Fault {
            matcher: RequestMatch::any(),
            action,
            times: None,
            skip: 0,
        }
    }
    pub fn respond(code: u16) -> Self {
        let retry_after = matches!(code, 429 | 503).then_some(1);
        Self::new(FaultAction::Respond {
            code,
            message: None,
            retry_after,
        })
    }
    pub fn delay(d: Duration) -> Self {
        Self::new(FaultAction::Delay(d))
    }
    pub fn drop_watch(after_events: usize) -> Self {
        Self::new(FaultAction::DropWatch { after_events })
    }
    pub fn stall_watch(d: Duration) -> Self {
        Self::new(FaultAction::StallWatch(d))
    }
    pub fn on(mut self, m: RequestMatch) -> Self {
        self.matcher = m;
        self
    }
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }
    pub fn once(self) -> Self {
        self.times(1)
    }
    pub fn skip(mut self, n: u32) -> Self {
        self.skip = n;
        self
    }
    pub fn retry_after(mut self, secs: u64) -> Self {
        if let FaultAction::Respond { retry_after, .. } = &mut self.action {
            *retry_after = Some(secs);
        }
        self
    }
}

/// Handle to a registered fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultId(u64);

struct Rule {
    id: FaultId,
    fault: Fault,
    seen: u32,
    fired: u32,
}

/// What the server should do with one request.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    pub delay: Duration,
    pub respond: Option<ApiError>,
    pub drop_after: Option<usize>,
    pub stall: Option<Duration>,
}

/// Signals to open watch streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct WatchSignal {
    /// Bumped to end every open watch cleanly.
    pub drop_epoch: u64,
    /// Bumped to abort every open watch (connection error), for outages.
    pub abort_epoch: u64,
}

/// Registry of faults, shared by the server and the test.
pub struct FaultController {
    rules: Mutex<(u64, Vec<Rule>)>,
    fired: Mutex<Vec<(FaultId, u32)>>,
    outage_until: Mutex<Option<Instant>>,
    stall_until: Mutex<Option<Instant>>,
    signal: watch::Sender<WatchSignal>,
}

impl Default for FaultController {
    fn default() -> Self {
        FaultController {
            rules: Mutex::new((0, vec![])),
            fired: Mutex::new(vec![]),
            outage_until: Mutex::new(None),
            stall_until: Mutex::new(None),
            signal: watch::channel(WatchSignal::default()).0,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultController {
    /// Register a fault; it applies to requests that start after this call.
    pub fn add(&self, fault: Fault) -> FaultId {
        let mut g = lock(&self.rules);
        g.0 += 1;
        let id = FaultId(g.0);
        g.1.push(Rule {
            id,
            fault,
            seen: 0,
            fired: 0,
        });
        id
    }

    pub fn remove(&self, id: FaultId) {
        lock(&self.rules).1.retain(|r| r.id != id);
    }

    /// Remove every rule and end any outage or stall.
    pub fn clear(&self) {
        lock(&self.rules).1.clear();
        *lock(&self.outage_until) = None;
        *lock(&self.stall_until) = None;
    }

    /// How many times a fault has fired (also after it was used up).
    pub fn fired(&self, id: FaultId) -> u32 {
        lock(&self.fired)
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }

    /// End every open watch stream now, cleanly (the client sees the stream finish).
    pub fn drop_watches(&self) {
        self.signal.send_modify(|s| s.drop_epoch += 1);
    }

    /// Open and new watch streams send nothing for `d` (events queue up behind the stall).
    pub fn stall_watches(&self, d: Duration) {
        *lock(&self.stall_until) = Some(Instant::now() + d);
    }

    /// For `d`, every connection and request is dropped without an answer, and open
    /// watches are aborted, as if the server were down.
    pub fn outage(&self, d: Duration) {
        *lock(&self.outage_until) = Some(Instant::now() + d);
        self.signal.send_modify(|s| s.abort_epoch += 1);
    }

    pub fn in_outage(&self) -> bool {
        lock(&self.outage_until).is_some_and(|t| Instant::now() < t)
    }

    pub(crate) fn stalled_until(&self) -> Option<Instant> {
        lock(&self.stall_until).filter(|t| Instant::now() < *t)
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<WatchSignal> {
        self.signal.subscribe()
    }

    /// Decide what happens to a request. Every matching delay adds up; the first matching
    /// response, drop or stall wins. Used-up rules are removed.
    pub(crate) fn decide(&self, req: &RequestInfo) -> Decision {
        let mut d = Decision::default();
        let mut g = lock(&self.rules);
        let mut fired_now = vec![];
        for r in g.1.iter_mut() {
            if !r.fault.matcher.matches(req) {
                continue;
            }
            let is_watch_action = matches!(
                r.fault.action,
                FaultAction::DropWatch { .. } | FaultAction::StallWatch(_)
            );
            if is_watch_action && req.verb != "watch" {
                continue;
            }
            let terminal_taken = d.respond.is_some() || d.drop_after.is_some() || d.stall.is_some();
            if terminal_taken && !matches!(r.fault.action, FaultAction::Delay(_)) {
                continue;
            }
            r.seen += 1;
            if r.seen <= r.fault.skip {
                continue;
            }
            if r.fault.times.is_some_and(|t| r.fired >= t) {
                continue;
            }
            r.fired += 1;
            fired_now.push(r.id);
            match &r.fault.action {
                FaultAction::Respond {
                    code,
                    message,
                    retry_after,
                } => {
                    let mut e = ApiError::from_code(*code, message.as_deref());
                    e.retry_after = *retry_after;
                    d.respond = Some(e);
                }
                FaultAction::Delay(t) => d.delay += *t,
                FaultAction::DropWatch { after_events } => d.drop_after = Some(*after_events),
                FaultAction::StallWatch(t) => d.stall = Some(*t),
            }
        }
        g.1.retain(|r| r.fault.times.is_none_or(|t| r.fired < t));
        drop(g);
        let mut f = lock(&self.fired);
        for id in fired_now {
            match f.iter_mut().find(|(i, _)| *i == id) {
                Some((_, n)) => *n += 1,
                None => f.push((id, 1)),
            }
        }
        d
    }
}
