//! ValidatingAdmissionPolicies (`admissionregistration.k8s.io/v1`), enforced on every write
//! made over HTTP, as kube-apiserver's `ValidatingAdmissionPolicy` admission plugin does.
//!
//! What was checked upstream (kubernetes/kubernetes, `staging/src/k8s.io/apiserver/pkg/...`)
//! and is modelled here:
//!
//! - Order (`admission/plugin/policy/validating/dispatcher.go`, `Dispatch`): a policy applies
//!   when its `matchConstraints` match the request; then each binding naming it whose
//!   `matchResources` match (no `matchResources`: every request the policy matches). The
//!   first denial wins; policies and bindings are taken here in name order.
//! - Matching (`admission/plugin/policy/matching/matching.go`, `webhook/predicates/rules/
//!   rules.go`, `.../namespace/matcher.go`, `.../object/matcher.go`): `namespaceSelector`
//!   (cluster-scoped requests always match; the labels are the namespace's, or for a
//!   namespace's own create/update the new object's; a missing namespace is a 404),
//!   `objectSelector` (the new or the old object's labels), `excludeResourceRules`, then
//!   `resourceRules` (none: everything). A rule matches on `operations` (or `*`),
//!   `apiGroups`, `apiVersions`, `resources` (`res/sub` with `*` on either side: `*` alone is
//!   every resource but no subresource), `scope` and `resourceNames`. Policies and bindings
//!   themselves are never subject to admission (`IsExemptAdmissionConfigurationResource`).
//! - Evaluation (`validating/validator.go`, `webhook/matchconditions/matcher.go`): all
//!   `matchConditions` must be true (any false: the binding does not apply; otherwise an error
//!   is the failure policy's); then each validation whose `expression` is not true denies
//!   with its `reason` (default `Invalid`) and message: the `messageExpression`'s string
//!   (trimmed; not used when empty, multi-line or over 5 KiB, nor when it fails), else
//!   `message`, else `failed expression: <expression>`.
//! - Errors (`validator.go`, `policyDecisionActionForError`; `admission/plugin/cel/
//!   activation.go`): an expression that fails to compile (`compilation error: ...`) or to
//!   run (`expression '<e>' resulted in error: ...`) denies under `failurePolicy: Fail` (the
//!   default) with that message and reason `Invalid`, and is ignored under `Ignore`.
//!   kube-apiserver refuses at creation a policy whose expressions do not compile
//!   (`pkg/apis/admissionregistration/validation/validation.go`); the double accepts it and
//!   treats the compile error as above, since its CEL is a subset of Kubernetes'.
//! - Actions (`dispatcher.go`): a denial counts when the binding's `validationActions` holds
//!   `Deny`; `Warn` and `Audit` are not modelled (nothing is sent or recorded).
//! - The answer (`dispatcher.go`; `admission/errors.go`, `NewForbidden`;
//!   `apimachinery/pkg/api/errors`, `NewForbidden`; `validating/policy_decision.go`,
//!   `reasonToCode`): a `Status` whose message is `<resource>[.<group>] "<name>" is
//!   forbidden: ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
//!   <message>`, whose reason is the validation's (`Forbidden` 403, `Unauthorized` 401,
//!   `RequestEntityTooLarge` 413, `Invalid` and anything else 422), with `details` naming the
//!   object (`kind` is the resource) and one cause carrying the policy's part of the message.
//!   The name is the request's, else the object's name or generateName, else `Unknown`.
//! - Inputs (`admission/plugin/cel/condition.go`, `CreateAdmissionRequest`): `object` (null
//!   on DELETE), `oldObject` (null on CREATE), `request` (`kind`, `resource`, `subResource`,
//!   `requestKind`, `requestResource`, `requestSubResource`, `name` (empty on a create by
//!   generateName), `namespace`, `operation`, `userInfo.username`, `userInfo.groups`,
//!   `dryRun`), `namespaceObject`, `params` (see below; null without a `paramKind`) and
//!   `variables`. The object is the one the write would store: after the patch, the
//!   endpoint's rules (status, resize) and the server-set metadata, before its new
//!   resourceVersion, as validating admission runs after mutation inside the storage update.
//! - Params (`generic/policy_source.go`, `calculatePolicyData` and
//!   `ensureParamsForPolicyLocked`; `generic/policy_dispatcher.go`, `CollectParams`): only a
//!   policy some binding names is enforced at all. Its `paramKind` (`apiVersion`, `kind`) is
//!   the served resource of that group, version and kind; none is a policy configuration error
//!   (`failed to configure policy: failed to find resource referenced by paramKind:
//!   '<group>/<version>, Kind=<kind>'`), and an `apiVersion` with more than one `/` leaves the
//!   policy out. Then per binding, after its `matchResources` and before any `matchConditions`
//!   (which see the params, so every request the binding matches needs them, whoever makes
//!   it): no `paramKind` or no `paramRef`, one evaluation with a null `params`; otherwise the
//!   `paramRef`'s `name` (one object, or none) or `selector` (every object whose labels it
//!   selects; `{}` all of them), in `paramRef.namespace` or, left unset for a namespaced kind,
//!   the request's namespace. The policy is evaluated once per param and each denial counts.
//!   No param: with `parameterNotFoundAction: Deny` a binding error, otherwise nothing is
//!   evaluated and the write is admitted (kube-apiserver requires the field; without it
//!   `CollectParams` does not deny). Binding errors: ``no params found for policy binding with
//!   `Deny` parameterNotFoundAction``, `cannot use namespaced paramRef in policy binding that
//!   matches cluster-scoped resources`, ``paramRef.namespace must not be provided for a
//!   cluster-scoped `paramKind` ``, `paramRef.name and paramRef.selector are mutually
//!   exclusive`, `one of name or selector must be provided`, each as `failed to configure
//!   binding: <error>`. Policy and binding configuration errors deny under `Fail` (reason
//!   `Invalid`, 422, whatever the binding's `validationActions`) and are ignored under
//!   `Ignore`. The params are read from the store as the write is admitted; kube-apiserver
//!   reads them from an informer's cache, a moment behind.
//!
//! Not modelled: `auditAnnotations`, the `Warn` and `Audit` actions, `matchPolicy:
//! Equivalent` (matching is exact), the `authorizer` variable, CEL cost budgets, type
//! checking, the status (`typeChecking`) kube-apiserver writes to a policy, the refusal at
//! creation of a binding whose `paramRef` is invalid (an invalid `selector` here selects
//! nothing), and the second or so kube-apiserver needs after a policy or param change (its
//! policy snapshot, its param informer's sync) before enforcing it.

mod expr;

use serde_json::{Value, json};

use expr::{Activation, Compiled, Inputs, Variable};
pub use expr::{Compiler, kubernetes_env, to_cel};

use crate::audit::RequestInfo;
use crate::error::ApiError;
use crate::resources::{ADMISSION_GROUP, ResourceDef};
use crate::util::{get_path, get_str, name_of};

/// The longest `messageExpression` result used as a message (bytes).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// What a write does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One write as admission sees it.
pub struct Attributes<'a> {
    /// Who writes (`user`, `groups`).
    pub requester: &'a RequestInfo,
    pub def: &'a ResourceDef,
    pub operation: Operation,
    /// `status`, `resize` or empty.
    pub subresource: &'a str,
    /// The namespace; for a namespace object, its own name (as kube-apiserver's attributes).
    pub namespace: &'a str,
    /// The name in the request: empty for a create by generateName.
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

/// The configuration in force: the stored policies and bindings, the namespace of the
/// request (`None` when it does not exist or the request is not namespaced), and where the
/// policies' params are read.
pub struct Configuration<'a> {
    pub policies: Vec<&'a Value>,
    pub bindings: Vec<&'a Value>,
    pub namespace: Option<&'a Value>,
    pub params: &'a dyn ParamSource,
}

/// The objects a policy's params are taken from.
pub trait ParamSource {
    /// The served resource of `kind` in `group` and `version`: its store name
    /// ([`ResourceDef::qualified`]) and whether it is namespaced.
    fn resource(&self, group: &str, version: &str, kind: &str) -> Option<(String, bool)>;
    /// The object `name` of resource `qualified` in `namespace` (empty: cluster-scoped).
    fn get(&self, qualified: &str, namespace: &str, name: &str) -> Option<&Value>;
    /// The objects of resource `qualified` in `namespace` (`None`: all of them).
    fn list(&self, qualified: &str, namespace: Option<&str>) -> Vec<&Value>;
}

/// No resource at all: a configuration whose policies take no params.
pub struct NoParams;

impl ParamSource for NoParams {
    fn resource(&self, _: &str, _: &str, _: &str) -> Option<(String, bool)> {
        None
    }

    fn get(&self, _: &str, _: &str, _: &str) -> Option<&Value> {
        None
    }

    fn list(&self, _: &str, _: Option<&str>) -> Vec<&Value> {
        vec![]
    }
}

/// A policy's `paramKind`, resolved to the resource that serves it.
struct ParamKind {
    qualified: String,
    namespaced: bool,
}

/// What a policy's `paramKind` comes to: none, a resource, no resource (a configuration
/// error, with its message), or an `apiVersion` that does not parse (the policy is left out).
enum ParamKindLookup {
    None,
    Resolved(ParamKind),
    NotFound(String),
    Unparsable,
}

fn param_kind(spec: &Value, source: &dyn ParamSource) -> ParamKindLookup {
    let Some(kind) = spec.get("paramKind").filter(|k| !k.is_null()) else {
        return ParamKindLookup::None;
    };
    let api_version = get_str(kind, "apiVersion").unwrap_or("");
    let kind = get_str(kind, "kind").unwrap_or("");
    // As schema.ParseGroupVersion: "" is empty, "v1" the core group, "g/v" a group.
    let (group, version) = match api_version.split('/').collect::<Vec<_>>()[..] {
        [""] => ("", ""),
        [version] => ("", version),
        [group, version] => (group, version),
        _ => return ParamKindLookup::Unparsable,
    };
    match source.resource(group, version, kind) {
        Some((qualified, namespaced)) => ParamKindLookup::Resolved(ParamKind {
            qualified,
            namespaced,
        }),
        None => ParamKindLookup::NotFound(format!(
            "failed to find resource referenced by paramKind: '{group}/{version}, Kind={kind}'"
        )),
    }
}

/// The params one binding evaluates its policy with (`CollectParams`): `[None]` without a
/// `paramKind` or a `paramRef`, the objects found otherwise (none: nothing is evaluated), or
/// the binding's configuration error.
fn collect_params<'v>(
    kind: Option<&ParamKind>,
    param_ref: Option<&Value>,
    request_namespace: &str,
    source: &'v dyn ParamSource,
) -> Result<Vec<Option<&'v Value>>, String> {
    let (Some(kind), Some(param_ref)) = (kind, param_ref.filter(|r| !r.is_null())) else {
        return Ok(vec![None]);
    };
    let ref_namespace = get_str(param_ref, "namespace").unwrap_or("");
    let namespace = if !kind.namespaced {
        if !ref_namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        ""
    } else if !ref_namespace.is_empty() {
        ref_namespace
    } else if !request_namespace.is_empty() {
        request_namespace
    } else {
        let e = "cannot use namespaced paramRef in policy binding that matches cluster-scoped \
                 resources";
        return Err(e.into());
    };
    let name = get_str(param_ref, "name").unwrap_or("");
    let selector = param_ref.get("selector").filter(|s| !s.is_null());
    let params: Vec<&Value> = match (name.is_empty(), selector) {
        (false, Some(_)) => {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".into());
        }
        (false, None) => source
            .get(&kind.qualified, namespace, name)
            .into_iter()
            .collect(),
        (true, Some(selector)) => source
            .list(&kind.qualified, Some(namespace).filter(|n| !n.is_empty()))
            .into_iter()
            .filter(|o| selector_matches(Some(selector), get_path(o, "metadata.labels")))
            .collect(),
        (true, None) => return Err("one of name or selector must be provided".into()),
    };
    if params.is_empty() && get_str(param_ref, "parameterNotFoundAction") == Some("Deny") {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(params.into_iter().map(Some).collect())
}

/// Whether writes of this resource are never admitted by policies (policies and bindings).
pub fn exempt(def: &ResourceDef) -> bool {
    def.group == ADMISSION_GROUP
        && matches!(
            def.plural.as_str(),
            "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// A denial: which policy and binding, why.
#[derive(Debug, Clone, PartialEq)]
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn exact_or_wildcard(items: &[&str], wanted: &str) -> bool {
    items.iter().any(|i| *i == "*" || *i == wanted)
}

/// One `NamedRuleWithOperations` against a request.
pub fn rule_matches(rule: &Value, a: &Attributes<'_>) -> bool {
    let is_namespace = a.def.group.is_empty() && a.def.plural == "namespaces";
    let scope = match get_str(rule, "scope").unwrap_or("*") {
        "*" => true,
        "Namespaced" => !is_namespace && !a.namespace.is_empty(),
        "Cluster" => is_namespace || a.namespace.is_empty(),
        _ => false,
    };
    let resource = strings(rule.get("resources")).iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == a.def.plural) && (sub == "*" || sub == a.subresource)
    });
    let names = strings(rule.get("resourceNames"));
    scope
        && exact_or_wildcard(&strings(rule.get("operations")), a.operation.as_str())
        && exact_or_wildcard(&strings(rule.get("apiGroups")), &a.def.group)
        && exact_or_wildcard(&strings(rule.get("apiVersions")), &a.def.version)
        && resource
        && (names.is_empty() || names.contains(&a.name))
}

/// A `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) against labels; absent or
/// empty selects everything. An unknown operator selects nothing.
pub fn selector_matches(selector: Option<&Value>, labels: Option<&Value>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return true;
    };
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_value = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|exprs| {
            exprs.iter().all(|e| {
                let key = get_str(e, "key").unwrap_or("");
                let values = strings(e.get("values"));
                match get_str(e, "operator").unwrap_or("") {
                    "In" => label(key).is_some_and(|v| values.contains(&v)),
                    "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                    "Exists" => label(key).is_some(),
                    "DoesNotExist" => label(key).is_none(),
                    _ => false,
                }
            })
        });
    by_value && by_expression
}

fn selector_is_empty(selector: Option<&Value>) -> bool {
    selector.is_none_or(|s| {
        let empty = |k: &str| {
            s.get(k).is_none_or(|v| {
                v.is_null()
                    || v.as_object().is_some_and(|o| o.is_empty())
                    || v.as_array().is_some_and(|a| a.is_empty())
            })
        };
        empty("matchLabels") && empty("matchExpressions")
    })
}

/// A policy's `matchConstraints` or a binding's `matchResources` against a request; an error
/// is a namespace selector that needs a namespace that does not exist (404).
pub fn resources_match(
    constraints: &Value,
    a: &Attributes<'_>,
    namespace: Option<&Value>,
) -> Result<bool, ApiError> {
    let is_namespace = a.def.group.is_empty() && a.def.plural == "namespaces";
    let ns_selector = constraints.get("namespaceSelector");
    let by_namespace =
        if (a.namespace.is_empty() && !is_namespace) || selector_is_empty(ns_selector) {
            Ok(true)
        } else if is_namespace
            && a.subresource.is_empty()
            && matches!(a.operation, Operation::Create | Operation::Update)
        {
            Ok(selector_matches(
                ns_selector,
                a.object.and_then(|o| get_path(o, "metadata.labels")),
            ))
        } else if let Some(ns) = namespace {
            Ok(selector_matches(
                ns_selector,
                get_path(ns, "metadata.labels"),
            ))
        } else {
            Err(ApiError::new(
                404,
                "NotFound",
                format!("namespaces \"{}\" not found", a.namespace),
            ))
        };
    let obj_selector = constraints.get("objectSelector");
    let by_object = selector_is_empty(obj_selector)
        || [a.object, a.old_object]
            .into_iter()
            .flatten()
            .any(|o| selector_matches(obj_selector, get_path(o, "metadata.labels")));
    if matches!(by_namespace, Ok(false)) || !by_object {
        return Ok(false);
    }
    let rules = |k: &str| {
        constraints
            .get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    if rules("excludeResourceRules")
        .iter()
        .any(|r| rule_matches(r, a))
    {
        return Ok(false);
    }
    let include = rules("resourceRules");
    if !include.is_empty() && !include.iter().any(|r| rule_matches(r, a)) {
        return Ok(false);
    }
    by_namespace
}

/// The `request` variable.
fn request_value(a: &Attributes<'_>) -> Value {
    let kind = json!({"group": a.def.group, "version": a.def.version, "kind": a.def.kind});
    let resource =
        json!({"group": a.def.group, "version": a.def.version, "resource": a.def.plural});
    json!({
        "kind": kind,
        "resource": resource,
        "subResource": a.subresource,
        "requestKind": kind,
        "requestResource": resource,
        "requestSubResource": a.subresource,
        "name": a.name,
        "namespace": a.namespace,
        "operation": a.operation.as_str(),
        "userInfo": {"username": a.requester.user, "groups": a.requester.groups},
        "dryRun": false,
    })
}

/// How a policy's expressions fail.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FailurePolicy {
    Fail,
    Ignore,
}

/// The decisions of one policy for one binding and param: the denials (an empty list admits).
fn evaluate(
    compiler: &Compiler,
    spec: &Value,
    failure: FailurePolicy,
    a: &Attributes<'_>,
    namespace: Option<&Value>,
    params: Option<&Value>,
) -> Vec<(String, Option<String>)> {
    let list = |k: &str| {
        spec.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let source = |e: &Value, k: &str| get_str(e, k).unwrap_or("").to_owned();
    let variables: Vec<Variable> = list("variables")
        .iter()
        .map(|v| {
            let src = source(v, "expression");
            Variable {
                name: source(v, "name"),
                compiled: compiler.compile(&src),
                source: src,
            }
        })
        .collect();
    let request = request_value(a);
    let inputs = Inputs {
        object: a.object,
        old_object: a.old_object,
        request: &request,
        namespace_object: namespace,
        params,
    };
    let activation = Activation::new(compiler, &inputs, &variables);
    let run = |src: &str| -> Result<bool, String> {
        let compiled: Compiled = compiler.compile(src);
        match activation.eval(src, &compiled)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{src}' resulted in {other:?}, not a bool"
            )),
        }
    };
    let mut errors = vec![];
    for condition in list("matchConditions") {
        match run(&source(&condition, "expression")) {
            Ok(false) => return vec![],
            Ok(true) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return match failure {
            FailurePolicy::Ignore => vec![],
            // As an aggregate error prints: one alone, several in brackets.
            FailurePolicy::Fail if errors.len() == 1 => vec![(errors.remove(0), None)],
            FailurePolicy::Fail => vec![(format!("[{}]", errors.join(", ")), None)],
        };
    }
    let mut denials = vec![];
    for validation in list("validations") {
        let src = source(&validation, "expression");
        match run(&src) {
            Ok(true) => {}
            Err(e) if failure == FailurePolicy::Fail => denials.push((e, None)),
            Err(_) => {}
            Ok(false) => {
                let from_expression = get_str(&validation, "messageExpression")
                    .filter(|m| !m.trim().is_empty())
                    .and_then(|m| match activation.eval(m, &compiler.compile(m)) {
                        Ok(cel::Value::String(s)) => Some(s.trim().to_owned()),
                        _ => None,
                    })
                    .filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= MAX_MESSAGE_BYTES);
                let message = from_expression
                    .or_else(|| {
                        get_str(&validation, "message")
                            .map(|m| m.trim().to_owned())
                            .filter(|m| !m.is_empty())
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", src.trim()));
                let reason = get_str(&validation, "reason").map(str::to_owned);
                denials.push((message, Some(reason.unwrap_or_else(|| "Invalid".into()))));
            }
        }
    }
    denials
}

/// The admission policies in force, checked against writes.
#[derive(Default)]
pub struct Admission {
    compiler: Compiler,
}

impl Admission {
    /// Admit or deny a write; the error is the `Status` kube-apiserver answers with.
    pub fn validate(&self, a: &Attributes<'_>, config: &Configuration<'_>) -> Result<(), ApiError> {
        if exempt(a.def) || config.policies.is_empty() {
            return Ok(());
        }
        let mut policies = config.policies.clone();
        policies.sort_by_key(|p| name_of(p).to_owned());
        let mut bindings = config.bindings.clone();
        bindings.sort_by_key(|b| name_of(b).to_owned());
        let mut denied: Vec<Denial> = vec![];
        for policy in policies {
            let policy_name = name_of(policy);
            let spec = policy.get("spec").cloned().unwrap_or(Value::Null);
            let failure = match get_str(&spec, "failurePolicy") {
                Some("Ignore") => FailurePolicy::Ignore,
                _ => FailurePolicy::Fail,
            };
            let config_error = |binding: Option<&str>, message: String| Denial {
                policy: policy_name.to_owned(),
                binding: binding.map(str::to_owned),
                message,
                reason: None,
            };
            // Without matchConstraints (required upstream) a policy matches nothing; a
            // namespace selector's error only counts in a binding (as the dispatcher does).
            let Some(constraints) = spec.get("matchConstraints") else {
                continue;
            };
            if !resources_match(constraints, a, config.namespace).unwrap_or(false) {
                continue;
            }
            let named: Vec<&&Value> = bindings
                .iter()
                .filter(|b| get_str(b, "spec.policyName") == Some(policy_name))
                .collect();
            // kube-apiserver builds its hooks from the bindings: a policy none names is inert.
            if named.is_empty() {
                continue;
            }
            let fail = failure == FailurePolicy::Fail;
            let kind = match param_kind(&spec, config.params) {
                ParamKindLookup::None => None,
                ParamKindLookup::Resolved(kind) => Some(kind),
                ParamKindLookup::Unparsable => continue,
                ParamKindLookup::NotFound(e) => {
                    if fail {
                        denied.push(config_error(
                            None,
                            format!("failed to configure policy: {e}"),
                        ));
                    }
                    continue;
                }
            };
            for binding in named {
                let binding_name = name_of(binding);
                let matches = match get_path(binding, "spec.matchResources") {
                    None | Some(Value::Null) => Ok(true),
                    Some(mr) => resources_match(mr, a, config.namespace),
                };
                let params = match matches {
                    Ok(false) => continue,
                    Ok(true) => collect_params(
                        kind.as_ref(),
                        get_path(binding, "spec.paramRef"),
                        a.namespace,
                        config.params,
                    ),
                    Err(e) => Err(e.message),
                };
                let params = match params {
                    Ok(params) => params,
                    Err(e) => {
                        if fail {
                            let message = format!("failed to configure binding: {e}");
                            denied.push(config_error(Some(binding_name), message));
                        }
                        continue;
                    }
                };
                let denies = strings(get_path(binding, "spec.validationActions")).contains(&"Deny");
                if !denies {
                    continue;
                }
                for param in params {
                    for (message, reason) in
                        evaluate(&self.compiler, &spec, failure, a, config.namespace, param)
                    {
                        denied.push(Denial {
                            policy: policy_name.to_owned(),
                            binding: Some(binding_name.to_owned()),
                            message,
                            reason,
                        });
                    }
                }
            }
        }
        match denied.into_iter().next() {
            None => Ok(()),
            Some(d) => Err(denial_status(a, &d)),
        }
    }
}

/// The HTTP status of a denial's reason (`reasonToCode`).
pub fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

fn denial_status(a: &Attributes<'_>, d: &Denial) -> ApiError {
    let cause = match &d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.message
        ),
    };
    let object_name = |k: &str| {
        a.object
            .and_then(|o| get_str(o, k))
            .filter(|n| !n.is_empty())
    };
    let name = Some(a.name)
        .filter(|n| !n.is_empty())
        .or_else(|| object_name("metadata.name"))
        .or_else(|| object_name("metadata.generateName"))
        .unwrap_or("Unknown");
    let reason = d.reason.clone().unwrap_or_else(|| "Invalid".into());
    let mut details = a.def.details(name);
    details["causes"] = json!([{ "message": cause }]);
    let mut e = ApiError::new(
        reason_code(&reason),
        &reason,
        format!("{} \"{name}\" is forbidden: {cause}", a.def.qualified()),
    );
    e.details = Some(details);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::default_resources;

    fn def(plural: &str) -> ResourceDef {
        default_resources()
            .into_iter()
            .find(|d| d.plural == plural)
            .expect("a served resource")
    }

    fn requester() -> RequestInfo {
        RequestInfo {
            user: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..Default::default()
        }
    }

    fn attrs<'a>(
        requester: &'a RequestInfo,
        def: &'a ResourceDef,
        operation: Operation,
        subresource: &'a str,
        object: Option<&'a Value>,
    ) -> Attributes<'a> {
        Attributes {
            requester,
            def,
            operation,
            subresource,
            namespace: if def.namespaced { "default" } else { "" },
            name: "x",
            object,
            old_object: None,
        }
    }

    #[test]
    fn rules_match_groups_versions_resources_subresources_and_operations() {
        let who = requester();
        let pods = def("pods");
        let crr = def("containerrecreaterequests");
        let update = |d, sub| attrs(&who, d, Operation::Update, sub, None);
        let rule = json!({"apiGroups": [""], "apiVersions": ["v1"],
                          "resources": ["pods", "pods/status"], "operations": ["UPDATE"]});
        assert!(rule_matches(&rule, &update(&pods, "")));
        assert!(rule_matches(&rule, &update(&pods, "status")));
        assert!(!rule_matches(&rule, &update(&pods, "resize")), "not listed");
        assert!(!rule_matches(
            &rule,
            &attrs(&who, &pods, Operation::Create, "", None)
        ));
        assert!(!rule_matches(&rule, &update(&crr, "")), "another group");
        let star = json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]});
        assert!(rule_matches(&star, &update(&crr, "")));
        assert!(
            !rule_matches(&star, &update(&crr, "status")),
            "`*` is no subresource"
        );
        let all_sub = json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "operations": ["*"]});
        assert!(rule_matches(&all_sub, &update(&pods, "resize")));
        let pod_subs = json!({"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods/*"], "operations": ["*"]});
        assert!(rule_matches(&pod_subs, &update(&pods, "status")));
        // As upstream's rules matcher: `pods/*` takes the pod itself too.
        assert!(rule_matches(&pod_subs, &update(&pods, "")));
        let cluster = json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"], "scope": "Cluster"});
        assert!(!rule_matches(&cluster, &update(&pods, "")));
        let nodes = def("nodes");
        assert!(rule_matches(&cluster, &update(&nodes, "")));
        let named = json!({"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["*"], "resourceNames": ["y"]});
        assert!(!rule_matches(&named, &update(&pods, "")));
    }

    #[test]
    fn selectors_and_exclusions() {
        let who = requester();
        let pods = def("pods");
        let labelled = json!({"metadata": {"labels": {"tier": "web"}}});
        let a = attrs(&who, &pods, Operation::Create, "", Some(&labelled));
        let any = json!({"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]});
        let c = |extra: Value| {
            let mut c = json!({"resourceRules": [any.clone()]});
            c.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            c
        };
        let ns = json!({"metadata": {"name": "default", "labels": {"env": "prod"}}});
        assert_eq!(resources_match(&c(json!({})), &a, None), Ok(true));
        let web = json!({"objectSelector": {"matchLabels": {"tier": "web"}}});
        assert_eq!(resources_match(&c(web), &a, None), Ok(true));
        let db = json!({"objectSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}});
        assert_eq!(resources_match(&c(db), &a, None), Ok(false));
        let prod = json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}});
        assert_eq!(resources_match(&c(prod.clone()), &a, Some(&ns)), Ok(true));
        let e = resources_match(&c(prod), &a, None).expect_err("no namespace");
        assert_eq!(e.code, 404);
        let dev = json!({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}});
        assert_eq!(resources_match(&c(dev), &a, Some(&ns)), Ok(false));
        let excluded = json!({"excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"], "operations": ["*"]}]});
        assert_eq!(resources_match(&c(excluded), &a, None), Ok(false));
        assert!(selector_matches(
            Some(&json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})),
            None
        ));
    }

    fn policy(validation: Value, failure: &str) -> (Value, Value) {
        let p = json!({"metadata": {"name": "p"}, "spec": {
            "failurePolicy": failure,
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]},
            "matchConditions": [{"name": "nodes", "expression": "'system:nodes' in request.userInfo.groups"}],
            "validations": [validation]}});
        let b = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"]}});
        (p, b)
    }

    fn check(p: &Value, b: &Value, who: &RequestInfo) -> Result<(), ApiError> {
        let pods = def("pods");
        let obj = json!({"metadata": {"name": "x", "labels": {}}, "spec": {}});
        let a = attrs(who, &pods, Operation::Create, "", Some(&obj));
        let config = Configuration {
            policies: vec![p],
            bindings: vec![b],
            namespace: None,
            params: &NoParams,
        };
        Admission::default().validate(&a, &config)
    }

    #[test]
    fn a_false_validation_denies_with_its_reason_and_message() {
        let who = requester();
        let (p, b) = policy(
            json!({"expression": "false", "messageExpression": "'no ' + request.userInfo.username", "reason": "Forbidden"}),
            "Fail",
        );
        let e = check(&p, &b, &who).expect_err("denied");
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        let cause =
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no system:node:n1";
        assert_eq!(e.message, format!("pods \"x\" is forbidden: {cause}"));
        let details = e.details.expect("details");
        assert_eq!(details["causes"], json!([{"message": cause}]));
        assert_eq!(
            (details["kind"].as_str(), details["name"].as_str()),
            (Some("pods"), Some("x"))
        );

        let (p, b) = policy(json!({"expression": "1 == 2"}), "Fail");
        let e = check(&p, &b, &who).expect_err("denied");
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert!(
            e.message
                .ends_with("denied request: failed expression: 1 == 2"),
            "{}",
            e.message
        );

        // Outside the match condition: not evaluated.
        let alice = RequestInfo {
            user: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        assert_eq!(check(&p, &b, &alice), Ok(()));
        // A binding that only warns does not deny.
        let warn = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Warn"]}});
        assert_eq!(check(&p, &warn, &who), Ok(()));
    }

    #[test]
    fn errors_follow_the_failure_policy() {
        let who = requester();
        let (p, b) = policy(
            json!({"expression": "object.spec.nodeName == 'n1'"}),
            "Fail",
        );
        let e = check(&p, &b, &who).expect_err("runtime error denies");
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains(
                "denied request: expression 'object.spec.nodeName == 'n1'' resulted in error:"
            ),
            "{}",
            e.message
        );
        let (p, b) = policy(
            json!({"expression": "object.spec.nodeName == 'n1'"}),
            "Ignore",
        );
        assert_eq!(check(&p, &b, &who), Ok(()));
        let (p, b) = policy(json!({"expression": "object.spec.(("}), "Fail");
        let e = check(&p, &b, &who).expect_err("compile error denies");
        assert!(
            e.message.contains("denied request: compilation error: "),
            "{}",
            e.message
        );
        let (p, b) = policy(json!({"expression": "object.spec.(("}), "Ignore");
        assert_eq!(check(&p, &b, &who), Ok(()));
    }

    #[test]
    fn policies_and_bindings_are_exempt() {
        assert!(exempt(&def("validatingadmissionpolicies")));
        assert!(exempt(&def("validatingadmissionpolicybindings")));
        assert!(!exempt(&def("pods")));
        assert_eq!(reason_code("Forbidden"), 403);
        assert_eq!(reason_code("Whatever"), 422);
    }
}
