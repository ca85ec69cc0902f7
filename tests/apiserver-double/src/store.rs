//! The object store: one global resourceVersion counter, per-resource objects, a bounded
//! per-resource event history (older resourceVersions answer 410), and watch fan-out.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::admission::{self, Admission};
use crate::audit::RequestInfo;
use crate::error::{ApiError, ApiResult};
use crate::resources::{
    CRDS, PodResizeApi, ResourceDef, SmpSchema, VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
};
use crate::rules::{self, Endpoint};
use crate::selectors::Filter;
use crate::util::{self, finalizers, get_path, meta_mut, name_of, namespace_of, rv_of};

/// Kind of a stored change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change in a resource's history.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: EventKind,
    /// The object after the change (for deletions, the final state at the deletion's rv).
    pub object: Value,
    /// The object before the change, to replay selector transitions and rebuild snapshots.
    pub prev: Option<Value>,
}

/// What a watch subscriber receives, in resourceVersion order.
#[derive(Debug, Clone)]
pub enum WatchItem {
    Change(Arc<Change>),
    Bookmark(u64),
}

type Key = (String, String);

#[derive(Default)]
struct Collection {
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    /// Changes with rv <= this may have been forgotten.
    compacted: u64,
    subscribers: Vec<(u64, UnboundedSender<WatchItem>)>,
}

struct Inner {
    rv: u64,
    next_sub: u64,
    collections: HashMap<String, Collection>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchFrom {
    /// Synthetic ADDED events for the current state, then changes (resourceVersion unset or "0").
    Now,
    /// Changes after this resourceVersion.
    After(u64),
    /// Only changes from now on (`sendInitialEvents=false` without a resourceVersion).
    Latest,
}

/// A registered watch.
pub struct Subscription {
    pub id: u64,
    /// Items to send before anything from `rx` (synthetic ADDED events or replayed history).
    pub initial: Vec<WatchItem>,
    /// The store's resourceVersion when the subscription was made.
    pub start_rv: u64,
    pub rx: UnboundedReceiver<WatchItem>,
}

/// List parameters after parsing.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

pub struct ListResult {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// Delete parameters after parsing.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// How a write is checked.
#[derive(Debug, Clone, Copy)]
pub struct WriteMode {
    pub endpoint: Endpoint,
    /// Patches may omit resourceVersion even where updates must carry it.
    pub is_patch: bool,
    /// The in-process test API: no endpoint rules, status kept on create.
    pub privileged: bool,
}

/// The shared store. Cheap to clone via `Arc` inside [`crate::ApiServer`].
pub struct Store {
    defs: Vec<Arc<ResourceDef>>,
    admission: Admission,
    inner: Mutex<Inner>,
    history_limit: usize,
    graceful_pod_deletion: bool,
}

fn too_old(rv: u64, compacted: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {rv} ({compacted})"))
}

fn too_large(rv: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {rv}, current: {current}"),
    );
    e.details = Some(
        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}),
    );
    // Like the real server: clients (kube-rs included) retry after a second.
    e.retry_after = Some(1);
    e
}

fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

impl Store {
    pub fn new(defs: Vec<ResourceDef>, history_limit: usize, graceful_pod_deletion: bool) -> Self {
        Store {
            defs: defs.into_iter().map(Arc::new).collect(),
            admission: Admission::default(),
            inner: Mutex::new(Inner {
                rv: 1,
                next_sub: 0,
                collections: HashMap::new(),
            }),
            history_limit: history_limit.max(1),
            graceful_pod_deletion,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not wedge every later test request.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn defs(&self) -> &[Arc<ResourceDef>] {
        &self.defs
    }

    /// Find a resource by `plural` (core first) or `plural.group`.
    pub fn resolve(&self, name: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.group.is_empty() && d.plural == name)
            .or_else(|| self.defs.iter().find(|d| d.qualified() == name))
            .or_else(|| self.defs.iter().find(|d| d.plural == name))
            .cloned()
    }

    /// Find a served resource by group, version and plural from a request path: a custom
    /// resource whose CRD is absent is not found, as on a real server.
    pub fn resolve_path(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceDef>> {
        let inner = self.lock();
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .filter(|d| Self::served_in(&inner, d))
            .cloned()
    }

    /// The resources served now (what discovery lists).
    pub fn served_defs(&self) -> Vec<Arc<ResourceDef>> {
        let inner = self.lock();
        self.defs
            .iter()
            .filter(|d| Self::served_in(&inner, d))
            .cloned()
            .collect()
    }

    /// Built-in resources always; a custom resource while a CustomResourceDefinition named
    /// `plural.group` exists, is not being deleted, and serves the resource's version.
    pub fn served(&self, def: &ResourceDef) -> bool {
        Self::served_in(&self.lock(), def)
    }

    fn served_in(inner: &Inner, def: &ResourceDef) -> bool {
        if !def.custom {
            return true;
        }
        let Some(crd) = inner
            .collections
            .get(CRDS)
            .and_then(|c| c.objects.get(&(String::new(), def.qualified())))
        else {
            return false;
        };
        get_path(crd, "metadata.deletionTimestamp").is_none()
            && get_path(crd, "spec.versions")
                .and_then(Value::as_array)
                .is_some_and(|versions| {
                    versions.iter().any(|v| {
                        v.get("name").and_then(Value::as_str) == Some(def.version.as_str())
                            && v.get("served").and_then(Value::as_bool) == Some(true)
                    })
                })
    }

    /// After a change to a CRD: a custom resource it no longer serves has its watches closed
    /// (clients relist and get 404), and when the CRD is gone its objects are deleted first,
    /// each with a DELETED event, as the apiextensions server's cleanup does.
    fn follow_crd(&self, inner: &mut Inner, crd: &Change) {
        let name = name_of(&crd.object).to_owned();
        let Some(def) = self.defs.iter().find(|d| d.custom && d.qualified() == name) else {
            return;
        };
        if Self::served_in(inner, def) {
            return;
        }
        if crd.kind == EventKind::Deleted {
            let objects: Vec<Value> = inner
                .collections
                .get(&name)
                .map(|c| c.objects.values().cloned().collect())
                .unwrap_or_default();
            for object in objects {
                inner.rv += 1;
                let rv = inner.rv;
                let mut gone = object.clone();
                if let Some(m) = meta_mut(&mut gone) {
                    m.insert("resourceVersion".into(), json!(rv.to_string()));
                }
                let change = Change {
                    rv,
                    kind: EventKind::Deleted,
                    object: gone,
                    prev: Some(object),
                };
                self.commit(inner, def, change);
            }
        }
        if let Some(coll) = inner.collections.get_mut(&name) {
            // Dropping the senders ends every open watch of the resource.
            coll.subscribers.clear();
        }
    }

    /// The admission policies and bindings stored now, and the request's namespace, decide
    /// on a write.
    fn admit(&self, inner: &Inner, attrs: &admission::Attributes<'_>) -> ApiResult<()> {
        let objects = |qualified: &str| -> Vec<&Value> {
            inner
                .collections
                .get(qualified)
                .map(|c| c.objects.values().collect())
                .unwrap_or_default()
        };
        let policies = objects(VALIDATING_ADMISSION_POLICIES);
        if policies.is_empty() {
            return Ok(());
        }
        let namespace = inner
            .collections
            .get("namespaces")
            .and_then(|c| c.objects.get(&(String::new(), attrs.namespace.to_owned())));
        let params = StoredParams {
            defs: &self.defs,
            inner,
        };
        let config = admission::Configuration {
            policies,
            bindings: objects(VALIDATING_ADMISSION_POLICY_BINDINGS),
            namespace,
            params: &params,
        };
        self.admission.validate(attrs, &config)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Forget all history: any watch or snapshot read from an older resourceVersion gets 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        let rv = inner.rv;
        for c in inner.collections.values_mut() {
            c.history.clear();
            c.compacted = rv;
        }
    }

    fn key(def: &ResourceDef, ns: &str, name: &str) -> Key {
        (
            if def.namespaced {
                ns.to_owned()
            } else {
                String::new()
            },
            name.to_owned(),
        )
    }

    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> ApiResult<Value> {
        let inner = self.lock();
        inner
            .collections
            .get(&def.qualified())
            .and_then(|c| c.objects.get(&Self::key(def, ns, name)))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))
    }

    /// Record a change: bump nothing (the caller set `rv`), append to history, fan out.
    fn commit(&self, inner: &mut Inner, def: &ResourceDef, change: Change) {
        let coll = inner.collections.entry(def.qualified()).or_default();
        let key = Self::key(def, namespace_of(&change.object), name_of(&change.object));
        match change.kind {
            EventKind::Deleted => {
                coll.objects.remove(&key);
            }
            _ => {
                coll.objects.insert(key, change.object.clone());
            }
        }
        let change = Arc::new(change);
        coll.history.push_back(change.clone());
        while coll.history.len() > self.history_limit {
            if let Some(old) = coll.history.pop_front() {
                coll.compacted = old.rv;
            }
        }
        coll.subscribers
            .retain(|(_, tx)| tx.send(WatchItem::Change(change.clone())).is_ok());
        if def.is_crd() {
            self.follow_crd(inner, &change);
        }
    }

    pub fn create(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: Value,
        privileged: bool,
    ) -> ApiResult<Value> {
        self.create_admitted(def, ns, obj, privileged, None)
    }

    /// Create over HTTP as `requester`: the admission policies in force decide (see
    /// [`crate::admission`]) on the object as it would be stored.
    pub fn create_by(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: Value,
        requester: &RequestInfo,
    ) -> ApiResult<Value> {
        self.create_admitted(def, ns, obj, false, Some(requester))
    }

    fn create_admitted(
        &self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        privileged: bool,
        requester: Option<&RequestInfo>,
    ) -> ApiResult<Value> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let api_version = def.api_version();
        for (field, want) in [
            ("apiVersion", api_version.as_str()),
            ("kind", def.kind.as_str()),
        ] {
            match obj.get(field).and_then(Value::as_str) {
                Some(v) if v != want => {
                    return Err(ApiError::bad_request(format!(
                        "the API version or kind in the request body ({v}) does not match the {field} of the resource ({want})"
                    )));
                }
                _ => {}
            }
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(api_version));
            o.insert("kind".into(), json!(def.kind));
        }
        let body_ns = namespace_of(&obj).to_owned();
        if def.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if !privileged && !rv_of(&obj).is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if !privileged {
            rules::prepare_create(def, &mut obj);
        } else if def.smp == SmpSchema::Pod && get_path(&obj, "status.qosClass").is_none() {
            // Keep test-provided status but fill what the server always sets.
            let qos = rules::qos_class(&obj);
            if let Some(o) = obj.as_object_mut() {
                let st = o.entry("status").or_insert_with(|| json!({}));
                if let Some(st) = st.as_object_mut() {
                    st.entry("phase").or_insert(json!("Pending"));
                    st.insert("qosClass".into(), json!(qos));
                }
            }
        }

        if def.is_crd() {
            rules::establish_crd(&mut obj);
        }
        let mut inner = self.lock();
        if !Self::served_in(&inner, def) {
            // The CRD went between routing and here: the path is no longer served.
            return Err(ApiError::page_not_found());
        }
        // The name in the request, as admission sees it: empty for a create by generateName.
        let requested_name = name_of(&obj).to_owned();
        let meta = meta_mut(&mut obj).ok_or_else(|| ApiError::bad_request("invalid object"))?;
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let generate = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let coll_name = def.qualified();
        if name.is_empty() {
            if generate.is_empty() {
                return Err(ApiError::invalid(
                    def,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            // Retry on the (unlikely) collision rather than failing the request.
            for _ in 0..16 {
                let candidate = format!("{generate}{}", util::name_suffix());
                let exists = inner
                    .collections
                    .get(&coll_name)
                    .is_some_and(|c| c.objects.contains_key(&Self::key(def, ns, &candidate)));
                if !exists {
                    name = candidate;
                    break;
                }
            }
        }
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                def,
                &name,
                "metadata.name",
                &format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        let key = Self::key(def, ns, &name);
        if inner
            .collections
            .get(&coll_name)
            .is_some_and(|c| c.objects.contains_key(&key))
        {
            return Err(ApiError::already_exists(def, &name));
        }
        meta.insert("name".into(), json!(name));
        if def.namespaced {
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(util::new_uid()));
        meta.insert("creationTimestamp".into(), json!(util::now_rfc3339()));
        for k in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
            "resourceVersion",
        ] {
            meta.remove(k);
        }
        if def.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if let Some(requester) = requester {
            let attrs = admission::Attributes {
                requester,
                def,
                operation: admission::Operation::Create,
                subresource: "",
                namespace: admission_namespace(def, ns, &name),
                name: &requested_name,
                object: Some(&obj),
                old_object: None,
            };
            self.admit(&inner, &attrs)?;
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(m) = meta_mut(&mut obj) {
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.commit(
            &mut inner,
            def,
            Change {
                rv,
                kind: EventKind::Added,
                object: obj.clone(),
                prev: None,
            },
        );
        Ok(obj)
    }

    /// Read-modify-write under the lock: `f` gets the current object and proposes a new one.
    pub fn update<F>(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mode: WriteMode,
        f: F,
    ) -> ApiResult<Value>
    where
        F: FnOnce(&Value) -> ApiResult<Value>,
    {
        self.update_admitted(def, ns, name, mode, None, f)
    }

    /// Update over HTTP as `requester`: the admission policies in force decide on the old
    /// object and the new one as it would be stored (after the patch and the endpoint's rules).
    pub fn update_by<F>(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mode: WriteMode,
        requester: &RequestInfo,
        f: F,
    ) -> ApiResult<Value>
    where
        F: FnOnce(&Value) -> ApiResult<Value>,
    {
        self.update_admitted(def, ns, name, mode, Some(requester), f)
    }

    fn update_admitted<F>(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        mode: WriteMode,
        requester: Option<&RequestInfo>,
        f: F,
    ) -> ApiResult<Value>
    where
        F: FnOnce(&Value) -> ApiResult<Value>,
    {
        let mut inner = self.lock();
        let key = Self::key(def, ns, name);
        let old = inner
            .collections
            .get(&def.qualified())
            .and_then(|c| c.objects.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        let proposed = f(&old)?;
        if !proposed.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let body_name = name_of(&proposed);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let body_ns = namespace_of(&proposed);
        if def.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        match rv_of(&proposed) {
            "" if !mode.is_patch && !mode.privileged && !def.allow_unconditional_update => {
                return Err(ApiError::invalid(
                    def,
                    name,
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                ));
            }
            "" => {}
            rv if rv != rv_of(&old) => return Err(ApiError::stale(def, name)),
            _ => {}
        }
        let mut new = if mode.privileged {
            proposed
        } else {
            rules::prepare_update(def, mode.endpoint, &old, proposed)?
        };
        // kube-apiserver's PodResizeValidator admission (1.36+; before it a resize beyond the
        // node is admitted and the kubelet answers Infeasible).
        if mode.endpoint == Endpoint::Resize
            && !mode.privileged
            && def.pod_resize == PodResizeApi::Subresource
        {
            let node = get_path(&new, "spec.nodeName")
                .and_then(Value::as_str)
                .and_then(|node| {
                    inner
                        .collections
                        .get("nodes")
                        .and_then(|c| c.objects.get(&(String::new(), node.to_owned())))
                });
            rules::check_node_allocatable(&new, node)?;
        }
        // As `rest.BeforeUpdate` after the strategy's PrepareForUpdate: a blank UID takes the
        // stored one, another one is refused (clients use it as a precondition: "this object,
        // not a successor of the same name"). Endpoints whose strategy keeps the stored
        // metadata (a custom resource's status, pods/resize) never see the client's.
        let stored_uid = get_path(&old, "metadata.uid").and_then(Value::as_str);
        match get_path(&new, "metadata.uid").and_then(Value::as_str) {
            Some(uid) if !uid.is_empty() && Some(uid) != stored_uid => {
                return Err(ApiError::invalid(
                    def,
                    name,
                    "metadata.uid",
                    &format!("Invalid value: \"{uid}\": field is immutable"),
                ));
            }
            _ => {}
        }
        // Server-owned metadata always comes from the stored object.
        if let Some(o) = new.as_object_mut() {
            o.insert("apiVersion".into(), json!(def.api_version()));
            o.insert("kind".into(), json!(def.kind));
        }
        let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
        let meta = meta_mut(&mut new).ok_or_else(|| ApiError::bad_request("invalid object"))?;
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        meta.remove("managedFields");
        meta.remove("selfLink");
        rules::validate_update(def, &old, &new)?;
        // A custom resource without a status subresource counts status changes too, as the
        // apiextensions strategy does (everything but metadata).
        let tracked = |v: &Value| {
            if def.custom && !def.status_subresource {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("metadata");
                }
                v
            } else {
                util::spec_part(v)
            }
        };
        if def.generation && tracked(&old) != tracked(&new) {
            let g = get_path(&old, "metadata.generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if let Some(m) = meta_mut(&mut new) {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        if let Some(requester) = requester {
            // Validating admission runs inside the storage update, on the object to store,
            // no-op writes included.
            let subresource = match mode.endpoint {
                Endpoint::Main => "",
                Endpoint::Status => "status",
                Endpoint::Resize => "resize",
            };
            let attrs = admission::Attributes {
                requester,
                def,
                operation: admission::Operation::Update,
                subresource,
                namespace: admission_namespace(def, ns, name),
                name,
                object: Some(&new),
                old_object: Some(&old),
            };
            self.admit(&inner, &attrs)?;
        }
        if new == old {
            // A no-op write keeps the resourceVersion and emits no event, like the real server.
            return Ok(old);
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(m) = meta_mut(&mut new) {
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let gone =
            get_path(&new, "metadata.deletionTimestamp").is_some() && finalizers(&new).is_empty();
        let kind = if gone {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        self.commit(
            &mut inner,
            def,
            Change {
                rv,
                kind,
                object: new.clone(),
                prev: Some(old),
            },
        );
        Ok(new)
    }

    /// Delete, or mark for deletion when finalizers remain (or for graceful pod deletion).
    pub fn delete(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        self.delete_admitted(def, ns, name, opts, None)
    }

    /// Delete over HTTP as `requester`: the admission policies in force decide on the stored
    /// object (`oldObject`). `requester.name` is the request's (empty in a deletecollection).
    pub fn delete_by(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        requester: &RequestInfo,
    ) -> ApiResult<Value> {
        self.delete_admitted(def, ns, name, opts, Some(requester))
    }

    fn delete_admitted(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        requester: Option<&RequestInfo>,
    ) -> ApiResult<Value> {
        let mut inner = self.lock();
        let key = Self::key(def, ns, name);
        let old = inner
            .collections
            .get(&def.qualified())
            .and_then(|c| c.objects.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        if let Some(requester) = requester {
            let attrs = admission::Attributes {
                requester,
                def,
                operation: admission::Operation::Delete,
                subresource: "",
                namespace: admission_namespace(def, ns, name),
                name: &requester.name,
                object: None,
                old_object: Some(&old),
            };
            self.admit(&inner, &attrs)?;
        }
        let uid = get_path(&old, "metadata.uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(want) = &opts.precondition_uid
            && want != uid
        {
            return Err(ApiError::conflict(
                def,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(want) = &opts.precondition_rv
            && want != rv_of(&old)
        {
            return Err(ApiError::conflict(
                def,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {}",
                    rv_of(&old)
                ),
            ));
        }
        let pending_finalizers = !finalizers(&old).is_empty();
        let grace = if def.smp == SmpSchema::Pod && self.graceful_pod_deletion {
            let spec_grace =
                get_path(&old, "spec.terminationGracePeriodSeconds").and_then(Value::as_i64);
            let g = opts
                .grace_period_seconds
                .or(spec_grace)
                .unwrap_or(30)
                .clamp(0, i64::from(u32::MAX));
            // Unscheduled pods go at once, as on the real server.
            if get_str_nonempty(&old, "spec.nodeName") {
                g
            } else {
                0
            }
        } else {
            0
        };
        let already_deleting = get_path(&old, "metadata.deletionTimestamp").is_some();
        // A pod bound to a node is always deleted through the graceful path, even with
        // period 0: updated (deletionTimestamp, deletionGracePeriodSeconds 0), then deleted,
        // and a watch sees both, as on kube-apiserver (tests/real_kube_double.rs).
        let bound_pod = def.smp == SmpSchema::Pod
            && self.graceful_pod_deletion
            && get_str_nonempty(&old, "spec.nodeName");
        let mut new = old.clone();
        // The pod as marked for deletion just before it goes, when it was.
        let mut marked = None;
        let meta = meta_mut(&mut new).ok_or_else(|| ApiError::bad_request("invalid object"))?;
        if pending_finalizers || grace > 0 || bound_pod {
            if already_deleting && grace == 0 && pending_finalizers {
                // Repeated deletes of an object waiting on finalizers change nothing.
                return Ok(old);
            }
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            if !already_deleting || grace == 0 {
                meta.insert(
                    "deletionTimestamp".into(),
                    json!(util::rfc3339(secs + grace as u64)),
                );
            }
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            // Marking an object for deletion the first time bumps its generation.
            if !already_deleting
                && let Some(g) = meta.get("generation").and_then(Value::as_i64)
                && g > 0
            {
                meta.insert("generation".into(), json!(g + 1));
            }
            if grace == 0 && !pending_finalizers {
                if bound_pod {
                    inner.rv += 1;
                    let rv = inner.rv;
                    if let Some(m) = meta_mut(&mut new) {
                        m.insert("resourceVersion".into(), json!(rv.to_string()));
                    }
                    self.commit(
                        &mut inner,
                        def,
                        Change {
                            rv,
                            kind: EventKind::Modified,
                            object: new.clone(),
                            prev: Some(old.clone()),
                        },
                    );
                    marked = Some(new.clone());
                }
                // fallthrough to the real delete below
            } else {
                inner.rv += 1;
                let rv = inner.rv;
                if let Some(m) = meta_mut(&mut new) {
                    m.insert("resourceVersion".into(), json!(rv.to_string()));
                }
                self.commit(
                    &mut inner,
                    def,
                    Change {
                        rv,
                        kind: EventKind::Modified,
                        object: new.clone(),
                        prev: Some(old),
                    },
                );
                return Ok(new);
            }
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(m) = meta_mut(&mut new) {
            m.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.commit(
            &mut inner,
            def,
            Change {
                rv,
                kind: EventKind::Deleted,
                object: new.clone(),
                prev: Some(marked.unwrap_or(old)),
            },
        );
        Ok(new)
    }

    /// The objects of a resource as they were at `rv`, rebuilt by undoing later history.
    fn snapshot(
        coll: Option<&Collection>,
        rv: u64,
        current: u64,
    ) -> ApiResult<BTreeMap<Key, Value>> {
        let Some(coll) = coll else {
            return Ok(BTreeMap::new());
        };
        if rv < coll.compacted {
            return Err(too_old(rv, coll.compacted));
        }
        if rv > current {
            return Err(too_large(rv, current));
        }
        let mut objects = coll.objects.clone();
        for ch in coll.history.iter().rev().take_while(|c| c.rv > rv) {
            let obj = ch.prev.as_ref().unwrap_or(&ch.object);
            let key = (namespace_of(obj).to_owned(), name_of(obj).to_owned());
            match (&ch.kind, &ch.prev) {
                (EventKind::Added, _) => {
                    objects.remove(&key);
                }
                (_, Some(prev)) => {
                    objects.insert(key, prev.clone());
                }
                (_, None) => {}
            }
        }
        Ok(objects)
    }

    pub fn list(
        &self,
        def: &ResourceDef,
        filter: &Filter,
        opts: &ListOptions,
    ) -> ApiResult<ListResult> {
        let inner = self.lock();
        let current = inner.rv;
        let coll = inner.collections.get(&def.qualified());
        let rv_param = opts.resource_version.as_deref().unwrap_or("");
        let (snapshot_rv, start_after, objects) = if let Some(token) = &opts.continue_token {
            if !rv_param.is_empty() {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let decoded = util::hex_decode(token).ok_or_else(|| {
                ApiError::bad_request(
                    "continue key is not valid: incorrect encoded start resourceVersion",
                )
            })?;
            let mut parts = decoded.splitn(3, '\0');
            let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(ApiError::bad_request("continue key is not valid"));
            };
            let rv = parse_rv(rv)?;
            let objects = Self::snapshot(coll, rv, current).map_err(|e| {
                if e.code == 410 {
                    ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    )
                } else {
                    e
                }
            })?;
            (rv, Some((ns.to_owned(), name.to_owned())), objects)
        } else {
            let exact = opts.resource_version_match.as_deref() == Some("Exact");
            match opts.resource_version_match.as_deref() {
                None | Some("") | Some("Exact") | Some("NotOlderThan") => {}
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "resourceVersionMatch: Unsupported value: {other:?}"
                    )));
                }
            }
            if rv_param.is_empty()
                && opts
                    .resource_version_match
                    .as_deref()
                    .is_some_and(|m| !m.is_empty())
            {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if rv_param.is_empty() || rv_param == "0" {
                if exact && rv_param == "0" {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                (
                    current,
                    None,
                    coll.map(|c| c.objects.clone()).unwrap_or_default(),
                )
            } else {
                let rv = parse_rv(rv_param)?;
                if exact {
                    (rv, None, Self::snapshot(coll, rv, current)?)
                } else if rv > current {
                    return Err(too_large(rv, current));
                } else {
                    (
                        current,
                        None,
                        coll.map(|c| c.objects.clone()).unwrap_or_default(),
                    )
                }
            }
        };
        drop(inner);

        // resourceVersion=0 is served from the cache, which ignores limit.
        let limit = if rv_param == "0" {
            None
        } else {
            opts.limit.filter(|l| *l > 0)
        };
        let mut items = vec![];
        let mut continue_token = None;
        let mut remaining = None;
        let mut iter = objects
            .iter()
            .filter(|(k, _)| start_after.as_ref().is_none_or(|s| *k > s))
            .filter(|(_, v)| filter.matches(v));
        for (k, v) in iter.by_ref() {
            items.push(v.clone());
            if limit.is_some_and(|l| items.len() >= l) {
                let rest = iter.clone().count();
                if rest > 0 {
                    continue_token = Some(util::hex_encode(&format!(
                        "{snapshot_rv}\0{}\0{}",
                        k.0, k.1
                    )));
                    remaining = Some(rest);
                }
                break;
            }
        }
        Ok(ListResult {
            items,
            resource_version: snapshot_rv,
            continue_token,
            remaining,
        })
    }

    /// Register a watch; history from `from` is replayed into `initial`.
    pub fn watch(&self, def: &ResourceDef, from: WatchFrom) -> ApiResult<Subscription> {
        let mut inner = self.lock();
        let current = inner.rv;
        inner.next_sub += 1;
        let id = inner.next_sub;
        let coll = inner.collections.entry(def.qualified()).or_default();
        let initial = match from {
            WatchFrom::Latest => vec![],
            WatchFrom::Now => coll
                .objects
                .values()
                .map(|o| {
                    let rv = rv_of(o).parse().unwrap_or(0);
                    WatchItem::Change(Arc::new(Change {
                        rv,
                        kind: EventKind::Added,
                        object: o.clone(),
                        prev: None,
                    }))
                })
                .collect(),
            WatchFrom::After(rv) => {
                if rv < coll.compacted {
                    return Err(too_old(rv, coll.compacted));
                }
                coll.history
                    .iter()
                    .filter(|c| c.rv > rv)
                    .map(|c| WatchItem::Change(c.clone()))
                    .collect()
            }
        };
        let (tx, rx) = unbounded_channel();
        coll.subscribers.push((id, tx));
        Ok(Subscription {
            id,
            initial,
            start_rv: current,
            rx,
        })
    }

    pub fn unwatch(&self, def: &ResourceDef, id: u64) {
        let mut inner = self.lock();
        if let Some(c) = inner.collections.get_mut(&def.qualified()) {
            c.subscribers.retain(|(sid, _)| *sid != id);
        }
    }

    /// Queue a bookmark at the current resourceVersion behind every change already queued.
    pub fn bookmark(&self, def: &ResourceDef, id: u64) {
        let inner = self.lock();
        let rv = inner.rv;
        if let Some(c) = inner.collections.get(&def.qualified())
            && let Some((_, tx)) = c.subscribers.iter().find(|(sid, _)| *sid == id)
        {
            let _ = tx.send(WatchItem::Bookmark(rv));
        }
    }
}

/// The stored objects, as admission policies' params: of the resources served now.
struct StoredParams<'a> {
    defs: &'a [Arc<ResourceDef>],
    inner: &'a Inner,
}

impl admission::ParamSource for StoredParams<'_> {
    fn resource(&self, group: &str, version: &str, kind: &str) -> Option<(String, bool)> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.kind == kind)
            .filter(|d| Store::served_in(self.inner, d))
            .map(|d| (d.qualified(), d.namespaced))
    }

    fn get(&self, qualified: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.inner
            .collections
            .get(qualified)?
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    fn list(&self, qualified: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.inner
            .collections
            .get(qualified)
            .map(|c| {
                c.objects
                    .iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
                    .map(|(_, o)| o)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The namespace admission sees: a namespace object's own name, as kube-apiserver's request
/// attributes carry it.
fn admission_namespace<'a>(def: &ResourceDef, ns: &'a str, name: &'a str) -> &'a str {
    if def.group.is_empty() && def.plural == "namespaces" {
        name
    } else if def.namespaced {
        ns
    } else {
        ""
    }
}

fn get_str_nonempty(v: &Value, path: &str) -> bool {
    util::get_str(v, path).is_some_and(|s| !s.is_empty())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}
