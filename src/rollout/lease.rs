//! The two Leases of rollout work in a namespace. Each agent taking part holds its own
//! (`inplaced-agent-<node>`), which tells the leader its node's claims will be carried out. One
//! agent holds the namespace's [`LEADER_LEASE`] and so leads every rollout there: it alone
//! decides and writes their status. The others look at the leader's Lease only when a rollout
//! they take part in has not changed for a Lease's duration (a leader that writes is alive),
//! and take it over once it has lapsed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ::kube::api::{Api, PostParams};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use super::object::{LABEL_AGENT_LEASE, LEADER_LEASE};
use super::plan::LEASE_DURATION;
use crate::restartrequest::object as restart;

/// How often a held Lease is renewed (a quarter of its duration, as the kubelet's).
pub(super) const LEASE_RENEWAL: Duration = Duration::from_secs(10);
/// The agents that find work in a namespace at the same moment (a rollout made) look at the
/// leader's Lease at a random point within this: the first takes it, the others then find it
/// held instead of all racing to make it.
const FIRST_LOOK_SPREAD: Duration = Duration::from_millis(500);

pub fn lease_name(node: &str) -> String {
    format!("inplaced-agent-{node}")
}

/// Whether `me` may take the Lease as read (`None`: there is none): it is its own, nobody's, or
/// lapsed at `now`. The holder's renewal time is the holder's clock: a clock far ahead delays a
/// takeover, one behind hastens it, and either way the rollouts' writes stay ordered by their
/// resourceVersion.
pub(super) fn may_take(lease: Option<&Lease>, me: &str, now: Timestamp) -> bool {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => return true,
        Some(holder) if holder == me => return true,
        Some(_) => {}
    }
    let duration = spec
        .lease_duration_seconds
        .map_or(LEASE_DURATION.as_secs() as i64, i64::from);
    spec.renew_time
        .as_ref()
        .is_none_or(|renewed| renewed.0.as_second() + duration <= now.as_second())
}

/// `lease` renewed now in `me`'s name.
fn renewed(mut lease: Lease, me: &str, now: Timestamp) -> Lease {
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(me) {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.holder_identity = Some(me.to_string());
    spec.lease_duration_seconds = Some(LEASE_DURATION.as_secs() as i32);
    spec.renew_time = Some(MicroTime(now));
    lease
}

fn new_lease(name: &str, labels: BTreeMap<String, String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        spec: None,
    }
}

/// Where this agent stands with a namespace's leader Lease.
#[derive(Debug)]
enum Lead {
    /// Not looked at yet: at this time.
    Unknown { look_at: Instant },
    /// Another agent holds it: looked at again at this time, unless the rollouts show the
    /// leader at work before.
    Following { look_at: Instant },
    /// This agent holds it, as last written; renewed at that time.
    Holding {
        lease: Box<Lease>,
        renew_at: Instant,
    },
}

/// This agent's part in the leadership of one namespace's rollouts.
#[derive(Debug)]
pub(super) struct Leadership {
    lead: Lead,
    /// A refusal said once (the node-bound identity may write no Lease but its kubelet's).
    refusal_said: bool,
}

impl Leadership {
    pub(super) fn new() -> Leadership {
        let spread = FIRST_LOOK_SPREAD.mul_f64(rand::random_range(0.0..1.0));
        Leadership {
            lead: Lead::Unknown {
                look_at: Instant::now() + spread,
            },
            refusal_said: false,
        }
    }

    pub(super) fn leads(&self) -> bool {
        matches!(self.lead, Lead::Holding { .. })
    }

    /// A rollout this agent takes part in changed: its leader is at work, so its Lease need not
    /// be looked at for another Lease's duration.
    pub(super) fn leader_seen_at_work(&mut self) {
        if let Lead::Following { look_at } = &mut self.lead {
            *look_at = Instant::now() + LEASE_DURATION;
        }
    }

    /// When [`Leadership::refresh`] has something to do next.
    pub(super) fn due(&self) -> Instant {
        match &self.lead {
            Lead::Unknown { look_at } | Lead::Following { look_at } => *look_at,
            Lead::Holding { renew_at, .. } => *renew_at,
        }
    }

    /// Does what is due: renews the Lease held, or looks at the leader's and takes it if it may.
    pub(super) async fn refresh(&mut self, api: &Api<Lease>, me: &str, namespace: &str) {
        if Instant::now() < self.due() {
            return;
        }
        let result = match &self.lead {
            Lead::Holding { lease, .. } => {
                let written = api
                    .replace(
                        LEADER_LEASE,
                        &PostParams::default(),
                        &renewed(lease.as_ref().clone(), me, Timestamp::now()),
                    )
                    .await;
                match written {
                    // Changed or deleted by someone else: read afresh.
                    Err(::kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                        self.look_and_take(api, me).await
                    }
                    other => other.map(Some),
                }
            }
            _ => self.look_and_take(api, me).await,
        };
        let was_leading = self.leads();
        match result {
            Ok(Some(lease)) => {
                self.lead = Lead::Holding {
                    lease: Box::new(lease),
                    renew_at: Instant::now() + LEASE_RENEWAL,
                }
            }
            Ok(None) => {
                self.lead = Lead::Following {
                    look_at: Instant::now() + LEASE_DURATION,
                }
            }
            Err(err) => {
                let forbidden = matches!(&err, ::kube::Error::Api(s) if s.code == 403);
                if !forbidden || !self.refusal_said {
                    tracing::warn!(namespace = %namespace, error = %err,
                        "cannot take or renew the rollouts' leader Lease; tried again later");
                    self.refusal_said |= forbidden;
                }
                // A Lease not renewed stays held until it lapses; tried again in a second.
                if let Lead::Holding { renew_at, .. } = &mut self.lead {
                    *renew_at = Instant::now() + Duration::from_secs(1);
                } else {
                    self.lead = Lead::Following {
                        look_at: Instant::now() + LEASE_RENEWAL,
                    };
                }
            }
        }
        if was_leading != self.leads() {
            tracing::info!(namespace = %namespace, leads = self.leads(),
                "rollouts' leadership of the namespace changed");
        }
    }

    /// Reads the leader's Lease and takes it when [`may_take`] allows: `Some` when this agent
    /// now holds it, `None` when another does (or won the race to take it).
    async fn look_and_take(
        &self,
        api: &Api<Lease>,
        me: &str,
    ) -> Result<Option<Lease>, ::kube::Error> {
        let now = Timestamp::now();
        let current = api.get_opt(LEADER_LEASE).await?;
        if !may_take(current.as_ref(), me, now) {
            return Ok(None);
        }
        let written = match current {
            Some(lease) => {
                api.replace(
                    LEADER_LEASE,
                    &PostParams::default(),
                    &renewed(lease, me, now),
                )
                .await
            }
            None => {
                let lease = new_lease(LEADER_LEASE, BTreeMap::new());
                api.create(&PostParams::default(), &renewed(lease, me, now))
                    .await
            }
        };
        match written {
            Ok(lease) => Ok(Some(lease)),
            // Another agent took it first.
            Err(::kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Creates or renews this agent's own Lease: one write of `last` (the Lease as this agent last
/// wrote it), else a create (an agent's first Lease in a namespace is usually new); read afresh
/// only when that is refused.
pub(super) async fn renew_agent_lease(
    api: &Api<Lease>,
    node: &str,
    last: Option<&Lease>,
) -> Result<Lease, ::kube::Error> {
    let name = lease_name(node);
    let now = Timestamp::now();
    let create = || async {
        let labels = [
            (LABEL_AGENT_LEASE.to_string(), "true".to_string()),
            (restart::LABEL_NODE_NAME.to_string(), node.to_string()),
        ]
        .into();
        let lease = new_lease(&name, labels);
        api.create(&PostParams::default(), &renewed(lease, node, now))
            .await
    };
    let first_try = match last {
        Some(lease) => {
            api.replace(
                &name,
                &PostParams::default(),
                &renewed(lease.clone(), node, now),
            )
            .await
        }
        None => create().await,
    };
    match first_try {
        // Changed, deleted, or there already (an agent restarted): read afresh.
        Err(::kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        other => return other,
    }
    match api.get_opt(&name).await? {
        Some(lease) => {
            api.replace(&name, &PostParams::default(), &renewed(lease, node, now))
                .await
        }
        None => create().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(holder: Option<&str>, renewed: Option<&str>, seconds: Option<i32>) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": LEADER_LEASE},
            "spec": {"holderIdentity": holder, "renewTime": renewed,
                     "leaseDurationSeconds": seconds},
        }))
        .unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_lease_is_taken_when_missing_unheld_own_or_lapsed() {
        let now = at("2026-12-06T10:00:40Z");
        assert!(may_take(None, "a", now), "none yet");
        assert!(may_take(Some(&lease(None, None, None)), "a", now));
        assert!(may_take(Some(&lease(Some(""), None, Some(40))), "a", now));
        let fresh = lease(Some("b"), Some("2026-12-06T10:00:01.000000Z"), Some(40));
        assert!(!may_take(Some(&fresh), "a", now), "b's, renewed 39 s ago");
        assert!(may_take(Some(&fresh), "b", now), "its own");
        let lapsed = lease(Some("b"), Some("2026-12-06T10:00:00.000000Z"), Some(40));
        assert!(
            may_take(Some(&lapsed), "a", now),
            "renewed 40 s ago: lapsed"
        );
        let never_renewed = lease(Some("b"), None, Some(40));
        assert!(may_take(Some(&never_renewed), "a", now));
        let longer = lease(Some("b"), Some("2026-12-06T10:00:00.000000Z"), Some(60));
        assert!(
            !may_take(Some(&longer), "a", now),
            "its own duration counts"
        );
    }

    #[test]
    fn a_lease_taken_over_gets_a_new_acquire_time_and_a_renewal_keeps_it() {
        let now = at("2026-12-06T10:00:40Z");
        let taken = renewed(
            lease(Some("b"), Some("2026-12-06T10:00:00Z"), Some(40)),
            "a",
            now,
        );
        let spec = taken.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.acquire_time.map(|t| t.0), Some(now));
        assert_eq!(spec.renew_time.map(|t| t.0), Some(now));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        let later = at("2026-12-06T10:00:50Z");
        let again = renewed(taken, "a", later).spec.unwrap();
        assert_eq!(again.acquire_time.map(|t| t.0), Some(now), "kept");
        assert_eq!(again.renew_time.map(|t| t.0), Some(later));
    }

    #[test]
    fn a_leader_seen_at_work_puts_off_the_next_look() {
        let mut following = Leadership {
            lead: Lead::Following {
                look_at: Instant::now(),
            },
            refusal_said: false,
        };
        following.leader_seen_at_work();
        assert!(following.due() > Instant::now() + LEASE_DURATION - Duration::from_secs(1));
        let mut unknown = Leadership::new();
        let due = unknown.due();
        unknown.leader_seen_at_work();
        assert_eq!(
            unknown.due(),
            due,
            "nobody known to lead yet: looked at as planned"
        );
        assert!(due <= Instant::now() + FIRST_LOOK_SPREAD);
    }
}
