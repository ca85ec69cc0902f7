//! In-memory Kubernetes API server double (issue 5).
//!
//! A real HTTP/1.1 server on 127.0.0.1 that kube-rs talks to as if it were kube-apiserver,
//! for the resources inplaced uses: pods (with `status` and `resize`), nodes, events,
//! limit ranges, kruise ContainerRecreateRequests and inplaced ContainerResizeRequests. Tests reach the
//! store directly for setup and assertions, inject faults, and read an audit log.
//!
//! Custom resources are served with a schema that keeps every field: the double neither
//! validates a CRD's schema nor prunes the fields it does not name, where kube-apiserver does
//! both (`real_kube_double` found a field dropped from the rollouts' CRD kept by the double).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use apiserver_double::{ApiServer, ServerConfig, Fault, RequestMatch};
//! use serde_json::json;
//!
//! let server = ApiServer::start(ServerConfig::default()).await?;
//! server.store().create("nodes", json!({"metadata": {"name": "node-1"}})).unwrap();
//! server.faults().add(Fault::respond(503).on(RequestMatch::any().verb("list")).once());
//! let kubeconfig = server.kubeconfig(None); // hand to kube::config::Kubeconfig::from_yaml
//! # let _ = kubeconfig;
//! assert!(server.audit().entries().is_empty());
//! # Ok(()) }
//! ```
//!
//! # Users and groups
//!
//! A request's user has groups, as on kube-apiserver: a client certificate's subject
//! organizations, or those given to a token with [`Tokens::add_with_groups`]
//! (`TOKEN=USER,GROUP,...` for the standalone binary); every authenticated user is also in
//! `system:authenticated`, and a request without credentials is `system:anonymous` in
//! `system:unauthenticated`. The audit log records them ([`RequestInfo::groups`]).
//!
//! # Admission policies
//!
//! ValidatingAdmissionPolicies and their bindings (`admissionregistration.k8s.io/v1`,
//! [`VALIDATING_ADMISSION_POLICIES`] and [`VALIDATING_ADMISSION_POLICY_BINDINGS`] in
//! [`ApiServer::store`]) are served, and enforced on every write made over HTTP: create,
//! update and patch (the `status` and `resize` subresources included), delete and each
//! object of a deletecollection. Writes through [`ApiServer::store`] are privileged and
//! bypass admission, as writes to etcd would.
//!
//! Enforced as kube-apiserver does ([`admission`] says what was checked upstream and where):
//! `matchConstraints` (`resourceRules` with `res/sub` and `*` forms, operations, scope,
//! `resourceNames`, `excludeResourceRules`, `namespaceSelector`, `objectSelector`), a
//! binding's `matchResources`, params (a policy's `paramKind`, a binding's `paramRef` by
//! `name` or `selector`, in its `namespace` or else the request's, with its
//! `parameterNotFoundAction`: read from the store as the write is admitted, the policy
//! evaluated once per param found), `matchConditions`, lazily evaluated `variables`, and
//! `validations` with `message`, `messageExpression` and `reason`, for bindings whose
//! `validationActions` hold `Deny`. CEL sees `object` (null on delete), `oldObject` (null on
//! create), `request`, `namespaceObject`, `variables` and `params` (the param object; null
//! without a `paramKind` or a `paramRef`); the object is the one the write would store, after
//! the patch and the endpoint's rules. No param found with `parameterNotFoundAction: Deny`
//! denies (under `failurePolicy: Fail`) every write the binding matches, whoever makes it:
//! params are collected before the `matchConditions` are evaluated (422, ``failed to
//! configure binding: no params found for policy binding with `Deny`
//! parameterNotFoundAction``), as on kube-apiserver. A denial is the
//! Status kube-apiserver answers (`<resource> "<name>" is forbidden: ValidatingAdmissionPolicy
//! '<policy>' with binding '<binding>' denied request: <message>`; 403 for reason
//! `Forbidden`, 422 `Invalid` by default) and writes nothing: no new resourceVersion, no
//! watch event. An expression that does not compile or fails as it runs denies under
//! `failurePolicy: Fail` and is ignored under `Ignore`; the server never panics on one.
//!
//! Not enforced: `auditAnnotations`, the `Warn` and `Audit` actions, `matchPolicy: Equivalent`
//! (matching is exact), the `authorizer` variable, CEL cost limits and type checking (an
//! uncompilable policy is accepted, where kube-apiserver would refuse it, and so is a binding
//! whose `paramRef` it would refuse), the status kube-apiserver writes to a policy, and the
//! moment kube-apiserver takes to enforce a policy, binding or param just written (here at
//! once). CEL is the `cel` crate's with its strings extension and
//! Kubernetes' list functions; Kubernetes' other libraries (quantity, URL, IP/CIDR, semver,
//! regex find, sets, timestamps and durations) are missing ([`admission`]).

pub mod admission;
pub mod audit;
pub mod auth;
pub mod discovery;
pub mod error;
pub mod faults;
mod http;
pub mod patch;
pub mod resources;
pub mod rules;
pub mod selectors;
pub mod store;
pub mod tls;
mod util;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub use audit::{AuditEntry, AuditLog, RequestInfo};
pub use auth::{ClientCa, Tokens, UserInfo};
pub use error::{ApiError, ApiResult};
pub use faults::{Fault, FaultAction, FaultController, FaultId, RequestMatch};
pub use resources::{
    CRDS, PodResizeApi, ResourceDef, VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
};
pub use rules::Endpoint;
pub use store::Store;
pub use tls::{Credential, ServingTls, TestCa};

/// Server settings. `Default` suits tests: ephemeral port, anonymous access.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Changes remembered per resource; watches or snapshot reads from before the
    /// window get `410 Gone`. Keep it small in tests that exercise relists.
    pub history_limit: usize,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Bearer token to user name, accepted for ever ([`ApiServer::tokens`] adds tokens that
    /// expire). Requests without credentials are `system:anonymous`; an unknown or expired
    /// token gets 401.
    pub tokens: HashMap<String, String>,
    /// Serve HTTPS instead of HTTP (see [`TlsSetup`]).
    pub tls: Option<TlsSetup>,
    /// Pods on a node are deleted gracefully (deletionTimestamp set, object kept until a
    /// delete with gracePeriodSeconds=0), as the real server does with a kubelet present.
    /// Off by default: without a kubelet such pods would never go away.
    pub graceful_pod_deletion: bool,
    /// More custom resources to serve, e.g. [`ResourceDef::custom`].
    pub extra_resources: Vec<ResourceDef>,
    /// Which in-place resize API the cluster has (default: `pods/resize` as from 1.33);
    /// [`PodResizeApi::for_release`] picks it for a release.
    pub pod_resize: PodResizeApi,
    /// Custom resources (`plural.group`) whose CRD is not installed at start: their paths
    /// answer 404 and discovery leaves them out until a test creates the CRD
    /// (`store().create(CRDS, def.crd_object())`). Every other custom resource's CRD is
    /// installed at start; deleting it stops serving the resource.
    pub absent_crds: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(60),
            tokens: HashMap::new(),
            tls: None,
            graceful_pod_deletion: false,
            extra_resources: vec![],
            pod_resize: PodResizeApi::default(),
            absent_crds: vec![],
        }
    }
}

/// HTTPS: the serving certificate, and the CA that client certificates are checked against
/// (without one, client certificates authenticate nobody). Both can be replaced while the
/// server runs ([`ApiServer::serving_tls`], [`ApiServer::client_ca`]).
#[derive(Debug, Clone)]
pub struct TlsSetup {
    pub serving: Credential,
    pub client_ca_pem: Option<String>,
}

/// A running server. Dropping it stops the listener and every connection.
pub struct ApiServer {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Arc<FaultController>,
    audit: Arc<AuditLog>,
    tokens: Arc<Tokens>,
    serving_tls: Option<Arc<ServingTls>>,
    client_ca: Option<Arc<ClientCa>>,
    task: JoinHandle<()>,
}

impl ApiServer {
    /// Bind and start serving in the background on the current tokio runtime.
    pub async fn start(config: ServerConfig) -> std::io::Result<ApiServer> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let mut defs = resources::resources_with(config.pod_resize);
        defs.extend(config.extra_resources.iter().cloned());
        let store = Arc::new(Store::new(
            defs,
            config.history_limit,
            config.graceful_pod_deletion,
        ));
        install_crds(&store, &config.absent_crds);
        let faults = Arc::new(FaultController::default());
        let audit = Arc::new(AuditLog::default());
        let tokens = Arc::new(Tokens::with(&config.tokens));
        let (serving_tls, client_ca) = match &config.tls {
            Some(setup) => {
                let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
                let provider = tls::provider();
                let serving = ServingTls::new(provider.clone(), &setup.serving).map_err(invalid)?;
                let client_ca = ClientCa::new(provider);
                if let Some(pem) = &setup.client_ca_pem {
                    client_ca.set(pem).map_err(invalid)?;
                }
                (Some(Arc::new(serving)), Some(Arc::new(client_ca)))
            }
            None => (None, None),
        };
        let state = Arc::new(http::State {
            store: store.clone(),
            faults: faults.clone(),
            audit: audit.clone(),
            tokens: tokens.clone(),
            client_ca: client_ca.clone(),
            bookmark_interval: config.bookmark_interval,
            addr,
        });
        let task = tokio::spawn(accept_loop(listener, state, serving_tls.clone()));
        Ok(ApiServer {
            addr,
            store,
            faults,
            audit,
            tokens,
            serving_tls,
            client_ca,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, or `https://` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.serving_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The bearer tokens accepted; tests add tokens that expire, and revoke them.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The serving certificate, to replace it (with TLS only).
    pub fn serving_tls(&self) -> Option<&ServingTls> {
        self.serving_tls.as_deref()
    }

    /// The CA client certificates are checked against, to replace it (with TLS only).
    pub fn client_ca(&self) -> Option<&ClientCa> {
        self.client_ca.as_deref()
    }

    /// Direct access to the objects, bypassing HTTP, faults and audit.
    pub fn store(&self) -> Objects<'_> {
        Objects(&self.store)
    }

    /// The underlying store, for the typed operations (`Store::update` with an endpoint).
    pub fn raw_store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn faults(&self) -> &FaultController {
        &self.faults
    }

    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// A kubeconfig (JSON, which YAML parsers accept) for this server; with `token`, the
    /// user authenticates with it (see [`ServerConfig::tokens`]).
    pub fn kubeconfig(&self, token: Option<&str>) -> String {
        kubeconfig_for(&self.url(), token)
    }

    /// A kubeconfig for this server with the given cluster fields (e.g. `certificate-authority`)
    /// and user fields (e.g. `client-certificate`, `tokenFile`, `exec`).
    pub fn kubeconfig_with(&self, cluster: Value, user: Value) -> String {
        kubeconfig_document(&self.url(), cluster, user)
    }

    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig(token))
    }

    /// Stop serving; open connections are closed.
    pub fn shutdown(self) {
        drop(self)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Creates the CRD of every custom resource but `absent`.
fn install_crds(store: &Store, absent: &[String]) {
    let Some(crds) = store.resolve(resources::CRDS) else {
        return;
    };
    for def in store.defs().iter().filter(|d| d.custom) {
        if absent.contains(&def.qualified()) {
            continue;
        }
        // Cannot fail on a fresh store: the names are valid and unique.
        let _ = store.create(&crds, "", def.crd_object(), true);
    }
}

/// A kubeconfig document pointing at `url`.
pub fn kubeconfig_for(url: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => json!({"token": t}),
        None => json!({}),
    };
    kubeconfig_document(url, json!({}), user)
}

fn kubeconfig_document(url: &str, mut cluster: Value, user: Value) -> String {
    cluster["server"] = Value::String(url.to_owned());
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "apiserver-double", "cluster": cluster}],
        "users": [{"name": "apiserver-double", "user": user}],
        "contexts": [{"name": "apiserver-double",
                      "context": {"cluster": "apiserver-double", "user": "apiserver-double", "namespace": "default"}}],
        "current-context": "apiserver-double",
        "preferences": {}
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<http::State>,
    serving_tls: Option<Arc<ServingTls>>,
) {
    // Owned here so aborting this task (server drop) aborts every connection too.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if state.faults.in_outage() {
                    // Closing at once is what a client of a dead server sees.
                    drop(stream);
                    continue;
                }
                let st = state.clone();
                let acceptor = serving_tls.as_ref().map(|tls| tls.acceptor());
                conns.spawn(async move {
                    match acceptor {
                        Some(acceptor) => {
                            // A failed handshake (an untrusted serving certificate) is the
                            // client's to report.
                            let Ok(stream) = acceptor.accept(stream).await else { return };
                            let peer = http::PeerCertificates(
                                stream.get_ref().1.peer_certificates().map(|chain| {
                                    chain.iter().map(|c| c.clone().into_owned()).collect()
                                }),
                            );
                            serve_connection(TokioIo::new(stream), st, Arc::new(peer)).await;
                        }
                        None => {
                            let peer = Arc::new(http::PeerCertificates(None));
                            serve_connection(TokioIo::new(stream), st, peer).await;
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection<I>(io: I, state: Arc<http::State>, peer: Arc<http::PeerCertificates>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(peer.clone());
        http::handle(state.clone(), req)
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}

/// Test-side object access by resource name (`pods`, `nodes`, `events`, `limitranges`,
/// `events.events.k8s.io`, `containerrecreaterequests.apps.kruise.io`,
/// `containerresizerequests.inplaced.io`, [`VALIDATING_ADMISSION_POLICIES`], ...). Writes
/// here are privileged: no subresource rules, status kept on create, no admission policies,
/// but resourceVersion, uid, generation, history and watch events behave as for HTTP writes.
pub struct Objects<'a>(&'a Store);

impl Objects<'_> {
    fn def(&self, resource: &str) -> ApiResult<Arc<ResourceDef>> {
        self.0
            .resolve(resource)
            .ok_or_else(|| ApiError::bad_request(format!("unknown resource {resource:?}")))
    }

    /// Create; the namespace comes from `metadata.namespace` (default `default`).
    pub fn create(&self, resource: &str, obj: Value) -> ApiResult<Value> {
        let def = self.def(resource)?;
        let ns = util::namespace_of(&obj);
        let ns = if ns.is_empty() { "default" } else { ns }.to_owned();
        self.0.create(&def, &ns, obj, true)
    }

    /// Installs the CRD of a custom resource the double knows (`resource` as
    /// `containerresizerequests.inplaced.io`): from now on it is served and discovered.
    pub fn install_crd(&self, resource: &str) -> ApiResult<Value> {
        let def = self.def(resource)?;
        self.create(CRDS, def.crd_object())
    }

    /// Deletes that CRD: the resource's objects are deleted (DELETED events), its open
    /// watches end, and its paths answer 404 again.
    pub fn remove_crd(&self, resource: &str) -> ApiResult<Value> {
        let def = self.def(resource)?;
        self.delete(CRDS, "", &def.qualified())
    }

    /// `namespace` is ignored for cluster-scoped resources.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let def = self.def(resource).ok()?;
        self.0.get(&def, namespace, name).ok()
    }

    /// All objects, or those of one namespace when `namespace` is non-empty.
    pub fn list(&self, resource: &str, namespace: &str) -> Vec<Value> {
        let Ok(def) = self.def(resource) else {
            return vec![];
        };
        let filter = selectors::Filter {
            namespace: Some(namespace.to_owned()).filter(|n| !n.is_empty()),
            ..Default::default()
        };
        self.0
            .list(&def, &filter, &store::ListOptions::default())
            .map(|r| r.items)
            .unwrap_or_default()
    }

    /// Replace the whole object (status included); a set resourceVersion must be current.
    pub fn replace(&self, resource: &str, obj: Value) -> ApiResult<Value> {
        let def = self.def(resource)?;
        let ns = util::namespace_of(&obj).to_owned();
        let ns = if ns.is_empty() && def.namespaced {
            "default".to_owned()
        } else {
            ns
        };
        let name = util::name_of(&obj).to_owned();
        let mode = store::WriteMode {
            endpoint: Endpoint::Main,
            is_patch: true,
            privileged: true,
        };
        self.0.update(&def, &ns, &name, mode, |_| Ok(obj))
    }

    /// Apply a JSON merge patch to the whole object (status included).
    pub fn merge_patch(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> ApiResult<Value> {
        let def = self.def(resource)?;
        let mode = store::WriteMode {
            endpoint: Endpoint::Main,
            is_patch: true,
            privileged: true,
        };
        self.0.update(&def, namespace, name, mode, |cur| {
            patch::apply(&def, patch::PatchType::Merge, cur, &patch)
        })
    }

    /// Delete as an HTTP delete without options would (finalizers respected).
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> ApiResult<Value> {
        let def = self.def(resource)?;
        self.0
            .delete(&def, namespace, name, &store::DeleteOptions::default())
    }

    pub fn resource_version(&self) -> u64 {
        self.0.resource_version()
    }

    /// Forget all history so every older resourceVersion answers 410.
    pub fn compact(&self) {
        self.0.compact()
    }
}
