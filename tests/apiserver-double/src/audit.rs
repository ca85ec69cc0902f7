//! The audit log: one entry per request, with the attributes RBAC authorizes on, so tests
//! can check an agent's calls against the Role it ships.

use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;

/// The request attributes authorization sees (a resource request, or a non-resource path).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RequestInfo {
    pub user: String,
    /// The user's groups, `system:authenticated` (or, anonymous, `system:unauthenticated`)
    /// included, as kube-apiserver's authenticators give them.
    #[serde(default)]
    pub groups: Vec<String>,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    /// Plural, e.g. `pods`; empty for non-resource requests.
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub is_resource: bool,
    /// Request path without the query.
    pub path: String,
}

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    pub seq: u64,
    #[serde(flatten)]
    pub request: RequestInfo,
    pub query: String,
    /// Patch type for PATCH requests (the Content-Type).
    pub content_type: String,
    /// HTTP status answered; 0 when the connection was dropped (outage).
    pub code: u16,
    /// Set when a fault rule or outage decided the answer.
    pub fault: Option<String>,
    /// The client's `User-Agent` (the audit event's `userAgent`).
    #[serde(default)]
    pub user_agent: String,
}

impl AuditEntry {
    /// `pods` or `pods/status`, as RBAC rules name resources.
    pub fn rbac_resource(&self) -> String {
        if self.request.subresource.is_empty() {
            self.request.resource.clone()
        } else {
            format!("{}/{}", self.request.resource, self.request.subresource)
        }
    }
}

#[derive(Default)]
pub struct AuditLog {
    entries: Mutex<Vec<AuditEntry>>,
    // Wakes `wait_for` callers so tests need not poll.
    recorded: tokio::sync::Notify,
}

impl AuditLog {
    pub(crate) fn record(&self, mut e: AuditEntry) {
        let mut g = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        e.seq = g.len() as u64 + 1;
        g.push(e);
        drop(g);
        self.recorded.notify_waiters();
    }

    /// Wait until an entry satisfying `pred` is (or already was) recorded; `None` on timeout.
    /// Handy to wait for an agent under test to make a given call.
    pub async fn wait_for(
        &self,
        timeout: std::time::Duration,
        pred: impl Fn(&AuditEntry) -> bool,
    ) -> Option<AuditEntry> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.recorded.notified();
            tokio::pin!(notified);
            // Register before checking, so a record between check and wait is not missed.
            notified.as_mut().enable();
            if let Some(e) = self.entries().into_iter().find(|e| pred(e)) {
                return Some(e);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Every entry so far, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Entries of resource requests (discovery and health checks left out).
    pub fn resource_entries(&self) -> Vec<AuditEntry> {
        self.entries()
            .into_iter()
            .filter(|e| e.request.is_resource)
            .collect()
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Entries that the given RBAC rules would not allow. `rules` may be a Role or
    /// ClusterRole object, a list of them, or a bare list of PolicyRules.
    pub fn not_allowed_by(&self, rules: &Value) -> Vec<AuditEntry> {
        let rules = collect_rules(rules);
        self.entries()
            .into_iter()
            .filter(|e| !rules.iter().any(|r| rule_allows(r, e)))
            .collect()
    }
}

fn collect_rules(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items
            .iter()
            .flat_map(|i| {
                if i.get("rules").is_some() || i.get("kind").is_some() {
                    collect_rules(i)
                } else {
                    vec![i.clone()]
                }
            })
            .collect(),
        Value::Object(o) => o
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => vec![],
    }
}

fn strings(rule: &Value, field: &str) -> Vec<String> {
    rule.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// One PolicyRule against one request, following RBAC's matching rules.
pub fn rule_allows(rule: &Value, e: &AuditEntry) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| v == "*" || *v == e.request.verb) {
        return false;
    }
    if !e.request.is_resource {
        return strings(rule, "nonResourceURLs").iter().any(|u| {
            u == "*"
                || *u == e.request.path
                || u.strip_suffix('*')
                    .is_some_and(|p| e.request.path.starts_with(p))
        });
    }
    let groups = strings(rule, "apiGroups");
    if !groups.iter().any(|g| g == "*" || *g == e.request.api_group) {
        return false;
    }
    let wanted = e.rbac_resource();
    let sub_wild = format!("*/{}", e.request.subresource);
    let resources = strings(rule, "resources");
    let resource_ok = resources
        .iter()
        .any(|r| r == "*" || *r == wanted || (!e.request.subresource.is_empty() && *r == sub_wild));
    if !resource_ok {
        return false;
    }
    let names = strings(rule, "resourceNames");
    names.is_empty() || (!e.request.name.is_empty() && names.contains(&e.request.name))
}
