//! HTTP routing and handlers: turns requests into store operations, applies faults,
//! writes the audit log, and streams watches as newline-delimited JSON.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep, sleep_until};

use crate::audit::{AuditEntry, AuditLog, RequestInfo};
use crate::auth::{self, ClientCa, Presented, Tokens, UserInfo};
use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::faults::{Decision, FaultController, WatchSignal};
use crate::patch::{self, PatchType};
use crate::resources::{ResourceDef, SmpSchema};
use crate::rules::Endpoint;
use crate::selectors::{FieldSelector, Filter, LabelSelector};
use crate::store::{
    Change, DeleteOptions, EventKind, ListOptions, Store, Subscription, WatchFrom, WatchItem,
    WriteMode,
};
use crate::util;

pub type Body = BoxBody<Bytes, io::Error>;

const MAX_BODY: usize = 16 << 20;

/// Everything a request handler needs.
pub(crate) struct State {
    pub store: Arc<Store>,
    pub faults: Arc<FaultController>,
    pub audit: Arc<AuditLog>,
    pub tokens: Arc<Tokens>,
    pub client_ca: Option<Arc<ClientCa>>,
    pub bookmark_interval: Duration,
    pub addr: SocketAddr,
}

/// A response body fed from a channel: how watch streams are written chunk by chunk.
struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx)
    }
}

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes))
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn json_response(code: u16, v: &Value, content_type: &str) -> Response<Body> {
    let mut resp = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, ct);
    }
    resp
}

fn ok_json(code: u16, v: &Value) -> Response<Body> {
    json_response(code, v, "application/json")
}

fn error_response(e: &ApiError) -> Response<Body> {
    if e.plain_text {
        let mut resp = Response::new(full(format!("{}\n", e.message).into_bytes()));
        *resp.status_mut() = StatusCode::from_u16(e.code).unwrap_or(StatusCode::NOT_FOUND);
        let headers = resp.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        return resp;
    }
    let mut resp = ok_json(e.code, &e.to_status());
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(RETRY_AFTER, v);
    }
    resp
}

/// What the path names.
enum Route {
    Version,
    Health,
    CoreVersions,
    CoreResources(String),
    Groups,
    Group(String),
    GroupResources(String, String),
    Resource {
        def: Arc<ResourceDef>,
        namespace: Option<String>,
        name: Option<String>,
        sub: Option<String>,
        legacy_watch: bool,
    },
    /// A resource path of a resource not served (an unknown group, a CRD not installed): 404,
    /// but audited and authorized as the resource request its path names, as kube-apiserver's
    /// RequestInfo is parsed from the path alone.
    Unserved(RequestInfo),
    NotFound,
}

fn route(store: &Store, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["api"] => Route::CoreVersions,
        ["api", v] => Route::CoreResources((*v).to_owned()),
        ["api", v, rest @ ..] => resource_route(store, "", v, rest),
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group((*g).to_owned()),
        ["apis", g, v] => Route::GroupResources((*g).to_owned(), (*v).to_owned()),
        ["apis", g, v, rest @ ..] => resource_route(store, g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(store: &Store, group: &str, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest.split_first() {
        Some((&"watch", tail)) => (true, tail),
        _ => (false, rest),
    };
    let own = |s: Option<&&str>| s.map(|s| (*s).to_owned());
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && rest.len() <= 5
        && let Some(def) = store.resolve_path(group, version, rest[2])
        && def.namespaced
    {
        return Route::Resource {
            def,
            namespace: Some(rest[1].to_owned()),
            name: own(rest.get(3)),
            sub: own(rest.get(4)),
            legacy_watch,
        };
    }
    let Some((plural, tail)) = rest.split_first() else {
        return Route::NotFound;
    };
    let Some(def) = store.resolve_path(group, version, plural) else {
        return unserved(group, version, rest);
    };
    if tail.len() > 2 || (def.namespaced && !tail.is_empty()) {
        return Route::NotFound;
    }
    Route::Resource {
        def,
        namespace: None,
        name: own(tail.first()),
        sub: own(tail.get(1)),
        legacy_watch,
    }
}

/// The request attributes of a path to a resource that is not served, as kube-apiserver
/// reads them: `[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]]`.
fn unserved(group: &str, version: &str, rest: &[&str]) -> Route {
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => ((*ns).to_owned(), tail),
        _ => (String::new(), rest),
    };
    let get = |i: usize| rest.get(i).map(|s| (*s).to_owned()).unwrap_or_default();
    if rest.is_empty() || rest.len() > 3 {
        return Route::NotFound;
    }
    Route::Unserved(RequestInfo {
        api_group: group.to_owned(),
        api_version: version.to_owned(),
        resource: get(0),
        name: get(1),
        subresource: get(2),
        namespace,
        is_resource: true,
        ..Default::default()
    })
}

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> &str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The client certificates of a request's connection (TLS only), as a request extension.
pub(crate) struct PeerCertificates(pub Option<Vec<rustls::pki_types::CertificateDer<'static>>>);

fn authenticate(state: &State, req: &Request<Incoming>) -> ApiResult<UserInfo> {
    let authorization = header(req, AUTHORIZATION);
    let bearer = match authorization {
        "" => None,
        // Another scheme (Basic) is credentials no authenticator here accepts.
        other => Some(other.strip_prefix("Bearer ").unwrap_or("")),
    };
    let peer = req.extensions().get::<Arc<PeerCertificates>>();
    let presented = Presented {
        bearer,
        certificates: peer.and_then(|p| p.0.as_deref()),
    };
    auth::authenticate(&state.tokens, state.client_ca.as_deref(), presented)
        .map_err(|()| ApiError::from_code(401, Some("Unauthorized")))
}

/// Entry point for one request. An `Err` makes hyper drop the connection (outages).
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, io::Error> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let content_type = header(&req, CONTENT_TYPE).to_owned();
    let mut info = RequestInfo {
        path: path.clone(),
        ..Default::default()
    };
    let mut entry = AuditEntry {
        seq: 0,
        request: info.clone(),
        query: query.clone(),
        content_type: String::new(),
        code: 0,
        fault: None,
        user_agent: header(&req, USER_AGENT).to_owned(),
    };
    if state.faults.in_outage() {
        return Err(dropped_by_outage(&state, entry, "outage".into()));
    }
    let user = authenticate(&state, &req);
    if let Ok(user) = &user {
        info.user = user.username.clone();
        info.groups = user.groups.clone();
    }

    let outcome = classify(&state, &req, &mut info);
    if req.method() == Method::PATCH {
        entry.content_type = content_type.clone();
    }
    entry.request = info.clone();
    let resp = match (user, outcome) {
        (Err(e), _) | (_, Err(e)) => error_response(&e),
        (Ok(_), Ok(route)) => {
            let decision = state.faults.decide(&info);
            if !decision.delay.is_zero() {
                sleep(decision.delay).await;
                entry.fault = Some(format!("delay {:?}", decision.delay));
                // An outage that began during the delay drops this request too.
                if state.faults.in_outage() {
                    let fault = format!("delay {:?}, then outage", decision.delay);
                    return Err(dropped_by_outage(&state, entry, fault));
                }
            }
            if let Some(e) = &decision.respond {
                entry.fault = Some(format!("respond {}", e.code));
                if info.verb == "watch" && e.code == 410 {
                    // The real server reports an expired watch inside a 200 stream.
                    error_event_stream(e)
                } else {
                    error_response(e)
                }
            } else {
                if decision.drop_after.is_some() || decision.stall.is_some() {
                    entry.fault = Some(format!("{decision:?}"));
                }
                match dispatch(&state, req, route, &info, decision).await {
                    Ok(r) => r,
                    Err(e) => error_response(&e),
                }
            }
        }
    };
    entry.code = resp.status().as_u16();
    state.audit.record(entry);
    Ok(resp)
}

/// Records a request an outage drops (code 0) and gives the error that makes hyper drop its
/// connection.
fn dropped_by_outage(state: &State, mut entry: AuditEntry, fault: String) -> io::Error {
    entry.fault = Some(fault);
    state.audit.record(entry);
    outage_error()
}

/// The error an outage ends a connection or a watch body with.
fn outage_error() -> io::Error {
    io::Error::other("injected outage")
}

/// Fill the authorization attributes and check the verb is allowed on the path.
fn classify(state: &State, req: &Request<Incoming>, info: &mut RequestInfo) -> ApiResult<Route> {
    let route = route(&state.store, req.uri().path());
    let query = util::parse_query(req.uri().query())
        .ok_or_else(|| ApiError::bad_request("malformed query string"))?;
    let is_watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    info.verb = match *req.method() {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
    .into();
    if let Route::Unserved(path) = &route {
        let watch = is_watch || path_is_legacy_watch(req.uri().path());
        info.verb = match (req.method(), path.name.is_empty()) {
            (&Method::GET, _) if watch => "watch",
            (&Method::GET, false) => "get",
            (&Method::GET, true) => "list",
            (&Method::DELETE, true) => "deletecollection",
            _ => info.verb.as_str(),
        }
        .to_owned();
        *info = RequestInfo {
            user: std::mem::take(&mut info.user),
            groups: std::mem::take(&mut info.groups),
            verb: std::mem::take(&mut info.verb),
            path: std::mem::take(&mut info.path),
            ..path.clone()
        };
        return Err(ApiError::page_not_found());
    }
    let Route::Resource {
        def,
        namespace,
        name,
        sub,
        legacy_watch,
    } = &route
    else {
        return Ok(route);
    };
    info.is_resource = true;
    info.api_group = def.group.clone();
    info.api_version = def.version.clone();
    info.resource = def.plural.clone();
    info.subresource = sub.clone().unwrap_or_default();
    info.namespace = namespace.clone().unwrap_or_default();
    info.name = name.clone().unwrap_or_default();
    let verb = match (req.method(), name.is_some()) {
        (&Method::GET, _) if is_watch || *legacy_watch => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return Err(ApiError::method_not_allowed()),
    };
    info.verb = verb.into();
    if matches!(verb, "list" | "watch")
        && let Some(selected) = query.get("fieldSelector").and_then(|f| selected_name(f))
    {
        // As kube-apiserver's RequestInfo: a list or watch selecting one name by field is
        // authorized as a request for that name (RBAC resourceNames apply).
        info.name = selected;
    }
    if let Some(s) = sub {
        if !def.has_subresource(s) {
            return Err(ApiError::path_not_found());
        }
        if !matches!(verb, "get" | "update" | "patch") {
            return Err(ApiError::method_not_allowed());
        }
    }
    Ok(route)
}

/// `/apis/G/V/watch/...` or `/api/V/watch/...`.
fn path_is_legacy_watch(path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    matches!(
        segs.as_slice(),
        ["api", _, "watch", ..] | ["apis", _, _, "watch", ..]
    )
}

/// The name a field selector requires exactly (`metadata.name=X` or `==X` among its terms).
fn selected_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let value = term.trim().strip_prefix("metadata.name")?;
        let value = value
            .strip_prefix("==")
            .or_else(|| value.strip_prefix('='))?;
        (!value.is_empty()).then(|| value.to_owned())
    })
}

async fn read_json(req: Request<Incoming>) -> ApiResult<Value> {
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::new(413, "RequestEntityTooLarge", format!("request body: {e}")))?
        .to_bytes();
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn parse_num<T: std::str::FromStr>(q: &HashMap<String, String>, key: &str) -> ApiResult<Option<T>> {
    match q.get(key).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid value for {key}: {v:?}"))),
    }
}

fn parse_bool(q: &HashMap<String, String>, key: &str) -> Option<bool> {
    q.get(key).map(|v| matches!(v.as_str(), "true" | "1"))
}

async fn dispatch(
    state: &State,
    req: Request<Incoming>,
    route: Route,
    info: &RequestInfo,
    decision: Decision,
) -> ApiResult<Response<Body>> {
    let accept = header(&req, hyper::header::ACCEPT).to_owned();
    // Discovery lists what is served now: a custom resource only while its CRD exists.
    let served = state.store.served_defs();
    let defs: Vec<&ResourceDef> = served.iter().map(|d| d.as_ref()).collect();
    let discovery_doc = |v: Option<Value>| {
        v.map(|v| ok_json(200, &v))
            .ok_or_else(ApiError::page_not_found)
    };
    if !matches!(route, Route::Resource { .. }) && req.method() != Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    match route {
        Route::Version => Ok(ok_json(200, &discovery::version())),
        Route::Health => {
            let mut r = Response::new(full(b"ok".to_vec()));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            Ok(r)
        }
        Route::CoreVersions if discovery::wants_aggregated(&accept) => Ok(json_response(
            200,
            &discovery::aggregated(&defs, true),
            discovery::AGGREGATED_CONTENT_TYPE,
        )),
        Route::CoreVersions => Ok(ok_json(
            200,
            &discovery::core_versions(&state.addr.to_string()),
        )),
        Route::CoreResources(v) => discovery_doc(discovery::resource_list(&defs, "", &v)),
        Route::Groups if discovery::wants_aggregated(&accept) => Ok(json_response(
            200,
            &discovery::aggregated(&defs, false),
            discovery::AGGREGATED_CONTENT_TYPE,
        )),
        Route::Groups => Ok(ok_json(200, &discovery::group_list(&defs))),
        Route::Group(g) => discovery_doc(discovery::group(&defs, &g)),
        Route::GroupResources(g, v) => discovery_doc(discovery::resource_list(&defs, &g, &v)),
        Route::NotFound | Route::Unserved(_) => Err(ApiError::page_not_found()),
        Route::Resource { def, .. } => resource(state, req, &def, info, decision).await,
    }
}

fn list_kind(def: &ResourceDef) -> String {
    format!("{}List", def.kind)
}

async fn resource(
    state: &State,
    req: Request<Incoming>,
    def: &Arc<ResourceDef>,
    info: &RequestInfo,
    decision: Decision,
) -> ApiResult<Response<Body>> {
    let q = util::parse_query(req.uri().query())
        .ok_or_else(|| ApiError::bad_request("malformed query string"))?;
    if q.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by apiserver-double",
        ));
    }
    let store = &state.store;
    let ns = info.namespace.as_str();
    let name = info.name.as_str();
    let endpoint =
        Endpoint::from_subresource(Some(info.subresource.as_str()).filter(|s| !s.is_empty()))
            .ok_or_else(ApiError::path_not_found)?;
    let filter = || -> ApiResult<Filter> {
        let mut f = Filter {
            namespace: Some(ns.to_owned()).filter(|n| !n.is_empty()),
            labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
            fields: FieldSelector::parse(
                q.get("fieldSelector").map(String::as_str).unwrap_or(""),
                def,
            )?,
        };
        if !name.is_empty() {
            // A watch on one object is a watch with a name field selector.
            f.fields.require("metadata.name", name);
        }
        Ok(f)
    };
    match info.verb.as_str() {
        "get" => {
            let obj = store.get(def, ns, name)?;
            Ok(ok_json(200, &obj))
        }
        "list" => {
            let opts = ListOptions {
                resource_version: q.get("resourceVersion").cloned(),
                resource_version_match: q.get("resourceVersionMatch").cloned(),
                limit: parse_num(&q, "limit")?,
                continue_token: q.get("continue").cloned().filter(|c| !c.is_empty()),
            };
            let f = filter()?;
            let res = store.list(def, &f, &opts)?;
            let mut meta = json!({"resourceVersion": res.resource_version.to_string()});
            if let Some(c) = res.continue_token {
                meta["continue"] = json!(c);
                let unfiltered = q.get("labelSelector").is_none_or(|s| s.is_empty())
                    && q.get("fieldSelector").is_none_or(|s| s.is_empty());
                if let Some(r) = res.remaining.filter(|_| unfiltered) {
                    meta["remainingItemCount"] = json!(r);
                }
            }
            Ok(ok_json(
                200,
                &json!({"kind": list_kind(def), "apiVersion": def.api_version(), "metadata": meta, "items": res.items}),
            ))
        }
        "watch" => watch(state, def, &q, filter()?, decision),
        "create" => {
            let body = read_json(req).await?;
            let obj = store.create_by(def, ns, body, info)?;
            Ok(ok_json(201, &obj))
        }
        "update" => {
            let body = read_json(req).await?;
            let mode = WriteMode {
                endpoint,
                is_patch: false,
                privileged: false,
            };
            let obj = store.update_by(def, ns, name, mode, info, |_| Ok(body))?;
            Ok(ok_json(200, &obj))
        }
        "patch" => {
            let kind = PatchType::from_content_type(header(&req, CONTENT_TYPE))?;
            let body = read_json(req).await?;
            let mode = WriteMode {
                endpoint,
                is_patch: true,
                privileged: false,
            };
            let obj = store.update_by(def, ns, name, mode, info, |cur| {
                patch::apply(def, kind, cur, &body)
            })?;
            Ok(ok_json(200, &obj))
        }
        "delete" => {
            let opts = delete_options(&q, read_json(req).await?)?;
            let obj = store.delete_by(def, ns, name, &opts, info)?;
            Ok(ok_json(200, &delete_answer(def, obj)))
        }
        "deletecollection" => {
            let opts = delete_options(&q, read_json(req).await?)?;
            let f = filter()?;
            let items = store.list(def, &f, &ListOptions::default())?.items;
            let mut deleted = vec![];
            for it in items {
                let (item_ns, item_name) = (util::namespace_of(&it), util::name_of(&it));
                match store.delete_by(def, item_ns, item_name, &opts, info) {
                    Ok(o) => deleted.push(o),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let rv = store.resource_version().to_string();
            Ok(ok_json(
                200,
                &json!({"kind": list_kind(def), "apiVersion": def.api_version(), "metadata": {"resourceVersion": rv}, "items": deleted}),
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn delete_options(q: &HashMap<String, String>, body: Value) -> ApiResult<DeleteOptions> {
    if !(body.is_null() || body.is_object()) {
        return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
    }
    let from_body = body.get("gracePeriodSeconds").and_then(Value::as_i64);
    let grace = match parse_num::<i64>(q, "gracePeriodSeconds")? {
        Some(g) => Some(g),
        None => from_body,
    };
    let pre = |k: &str| {
        body.get("preconditions")
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        precondition_uid: pre("uid"),
        precondition_rv: pre("resourceVersion"),
    })
}

/// Pods answer with the object; other resources with the object while finalizers keep it,
/// and with a `Success` Status once it is gone.
fn delete_answer(def: &ResourceDef, obj: Value) -> Value {
    let still_there = util::get_path(&obj, "metadata.deletionTimestamp").is_some()
        && (!util::finalizers(&obj).is_empty()
            || util::get_path(&obj, "metadata.deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .is_some_and(|g| g > 0));
    if def.smp == SmpSchema::Pod || still_there {
        return obj;
    }
    let mut details = def.details(util::name_of(&obj));
    details["uid"] = util::get_path(&obj, "metadata.uid")
        .cloned()
        .unwrap_or(Value::Null);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch(
    state: &State,
    def: &Arc<ResourceDef>,
    q: &HashMap<String, String>,
    filter: Filter,
    decision: Decision,
) -> ApiResult<Response<Body>> {
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let send_initial = parse_bool(q, "sendInitialEvents");
    let bookmarks = parse_bool(q, "allowWatchBookmarks").unwrap_or(false);
    if send_initial == Some(true) && !bookmarks {
        return Err(ApiError::bad_request(
            "allowWatchBookmarks: Required value: sendInitialEvents requires setting allowWatchBookmarks to true",
        ));
    }
    // Capped so a huge client value cannot overflow the deadline arithmetic.
    let timeout = parse_num::<u64>(q, "timeoutSeconds")?
        .unwrap_or(1800)
        .min(7 * 24 * 3600);
    let from = match (rv, send_initial) {
        ("" | "0", Some(false)) => WatchFrom::Latest,
        ("" | "0", _) | (_, Some(true)) => WatchFrom::Now,
        (n, _) => WatchFrom::After(
            n.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n:?}")))?,
        ),
    };
    let (tx, rx) = mpsc::channel(64);
    let mut resp = Response::new(ChannelBody(rx).boxed());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    match state.store.watch(def, from) {
        Ok(sub) => {
            // Subscribed here, and the signals seen taken here, not when the task first runs:
            // a drop or outage that comes after `opened` wakes the task's loop however late it
            // first runs. An outage that began before is seen by the check just after.
            let mut signal = state.faults.subscribe();
            let opened = *signal.borrow_and_update();
            if state.faults.in_outage() {
                // Cut like an open watch at an outage: the body fails, hyper drops the
                // connection.
                state.store.unwatch(def, sub.id);
                let _ = tx.try_send(Err(outage_error()));
                return Ok(resp);
            }
            let w = WatchTask {
                store: state.store.clone(),
                faults: state.faults.clone(),
                def: def.clone(),
                filter,
                bookmarks,
                initial_end: send_initial == Some(true),
                bookmark_interval: state.bookmark_interval,
                deadline: Instant::now() + Duration::from_secs(timeout),
                decision,
                tx,
            };
            tokio::spawn(w.run(sub, signal, opened));
        }
        // A too-old resourceVersion is reported in the stream, as the real server does.
        Err(e) if e.code == 410 => return Ok(error_event_stream(&e)),
        Err(e) => return Err(e),
    }
    Ok(resp)
}

/// A 200 watch response carrying one ERROR event, then the end of the stream.
fn error_event_stream(e: &ApiError) -> Response<Body> {
    // A channel (not a sized body) so it is chunked like every other watch response.
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(Ok(Frame::data(watch_line("ERROR", &e.to_status()))));
    let mut resp = Response::new(ChannelBody(rx).boxed());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

struct WatchTask {
    store: Arc<Store>,
    faults: Arc<FaultController>,
    def: Arc<ResourceDef>,
    filter: Filter,
    bookmarks: bool,
    initial_end: bool,
    bookmark_interval: Duration,
    deadline: Instant,
    decision: Decision,
    tx: mpsc::Sender<Result<Frame<Bytes>, io::Error>>,
}

enum Flow {
    Continue,
    Stop,
}

impl WatchTask {
    async fn run(
        self,
        mut sub: Subscription,
        signal: watch::Receiver<WatchSignal>,
        opened: WatchSignal,
    ) {
        let id = sub.id;
        self.stream(&mut sub, signal, opened).await;
        self.store.unwatch(&self.def, id);
    }

    /// `opened`: the fault signals when the watch was answered; `signal` has not seen any
    /// change since, so every later drop or outage wakes the loop below.
    async fn stream(
        &self,
        sub: &mut Subscription,
        mut signal: watch::Receiver<WatchSignal>,
        start: WatchSignal,
    ) {
        let mut sent = 0usize;
        if self.decision.drop_after == Some(0) {
            return;
        }
        if let Some(d) = self.decision.stall {
            tokio::select! {
                _ = sleep(d) => {}
                _ = self.tx.closed() => return,
            }
        }
        for item in std::mem::take(&mut sub.initial) {
            if let Flow::Stop = self.emit(item, &mut sent).await {
                return;
            }
        }
        if self.initial_end {
            let obj = json!({"kind": self.def.kind, "apiVersion": self.def.api_version(),
                "metadata": {"resourceVersion": sub.start_rv.to_string(),
                             "annotations": {"k8s.io/initial-events-end": "true"}}});
            if !self.send(watch_line("BOOKMARK", &obj)).await {
                return;
            }
        }
        let mut tick = tokio::time::interval_at(
            Instant::now() + self.bookmark_interval,
            self.bookmark_interval,
        );
        loop {
            tokio::select! {
                // Fault signals first: a drop requested before a change must win over it.
                biased;
                changed = signal.changed() => {
                    let s = *signal.borrow_and_update();
                    if changed.is_err() || s.drop_epoch != start.drop_epoch {
                        return;
                    }
                    if s.abort_epoch != start.abort_epoch {
                        let _ = self.tx.send(Err(outage_error())).await;
                        return;
                    }
                }
                _ = self.tx.closed() => return,
                _ = sleep_until(self.deadline) => return,
                item = sub.rx.recv() => match item {
                    None => return,
                    Some(item) => if let Flow::Stop = self.emit(item, &mut sent).await { return },
                },
                _ = tick.tick(), if self.bookmarks => self.store.bookmark(&self.def, sub.id),
            }
        }
    }

    async fn send(&self, line: Bytes) -> bool {
        if let Some(until) = self.faults.stalled_until() {
            tokio::select! {
                _ = sleep_until(until.into()) => {}
                _ = self.tx.closed() => return false,
            }
        }
        self.tx.send(Ok(Frame::data(line))).await.is_ok()
    }

    async fn emit(&self, item: WatchItem, sent: &mut usize) -> Flow {
        let is_event = matches!(item, WatchItem::Change(_));
        let line = match item {
            WatchItem::Bookmark(rv) => {
                if !self.bookmarks {
                    return Flow::Continue;
                }
                watch_line(
                    "BOOKMARK",
                    &json!({"kind": self.def.kind, "apiVersion": self.def.api_version(),
                            "metadata": {"resourceVersion": rv.to_string()}}),
                )
            }
            WatchItem::Change(ch) => match (self.visible(&ch), &ch.prev) {
                // Left the selector: the cacher sends the previous object, at the new version.
                (Some("DELETED"), Some(prev)) if ch.kind == EventKind::Modified => {
                    let mut prev = prev.clone();
                    if let (Some(meta), Some(rv)) = (
                        prev.get_mut("metadata").and_then(Value::as_object_mut),
                        ch.object.pointer("/metadata/resourceVersion"),
                    ) {
                        meta.insert("resourceVersion".into(), rv.clone());
                    }
                    watch_line("DELETED", &prev)
                }
                (Some(kind), _) => watch_line(kind, &ch.object),
                (None, _) => return Flow::Continue,
            },
        };
        if !self.send(line).await {
            return Flow::Stop;
        }
        if is_event {
            *sent += 1;
        }
        match self.decision.drop_after {
            Some(n) if *sent >= n => Flow::Stop,
            _ => Flow::Continue,
        }
    }

    /// The event type this watcher sees for a change, given selector transitions.
    fn visible(&self, ch: &Change) -> Option<&'static str> {
        let now = self.filter.matches(&ch.object);
        let before = ch.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        match ch.kind {
            EventKind::Added => now.then_some("ADDED"),
            EventKind::Deleted => (before || now).then_some("DELETED"),
            EventKind::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            store: Arc::new(Store::new(
                crate::resources::resources_with(Default::default()),
                1000,
                false,
            )),
            faults: Arc::new(FaultController::default()),
            audit: Arc::new(AuditLog::default()),
            tokens: Arc::default(),
            client_ca: None,
            bookmark_interval: Duration::from_secs(60),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// Opens a pod watch as the handler does and returns its first body frame, if any comes
    /// within a few seconds. `between` runs after the watch is answered and before its task is
    /// first polled (this runtime has one thread, and the task runs at the first await).
    async fn first_frame(
        state: &State,
        between: impl FnOnce(&State),
    ) -> Option<Option<Result<Frame<Bytes>, io::Error>>> {
        let def = state
            .store
            .defs()
            .iter()
            .find(|d| d.plural == "pods")
            .cloned()
            .expect("pods are served");
        let resp = watch(
            state,
            &def,
            &HashMap::new(),
            Filter::default(),
            Decision::default(),
        )
        .expect("the watch is answered");
        between(state);
        let mut body = resp.into_body();
        tokio::time::timeout(Duration::from_secs(3), body.frame())
            .await
            .ok()
    }

    #[tokio::test]
    async fn an_outage_before_the_watch_task_first_runs_cuts_it() {
        let frame = first_frame(&state(), |s| s.faults.outage(Duration::from_secs(30))).await;
        assert!(matches!(frame, Some(Some(Err(_)))), "{frame:?}");
    }

    /// An outage that began after the request's own outage check but before the watch
    /// subscribed (here: before the handler reached `watch`).
    #[tokio::test]
    async fn an_outage_before_the_watch_subscribes_cuts_it() {
        let state = state();
        state.faults.outage(Duration::from_secs(30));
        let frame = first_frame(&state, |_| {}).await;
        assert!(matches!(frame, Some(Some(Err(_)))), "{frame:?}");
    }

    #[tokio::test]
    async fn a_watch_without_an_outage_stays_open() {
        assert!(first_frame(&state(), |_| {}).await.is_none());
    }
}
