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
//!   `dryRun`), `namespaceObject`, `params` (always null) and `variables`. The object is the
//!   one the write would store: after the patch, the endpoint's rules (status, resize) and
//!   the server-set metadata, before its new resourceVersion, as validating admission runs
//!   after mutation inside the storage update.
//!
//! Not modelled: `paramKind`/`paramRef` (a policy with a `paramKind` fails to configure:
//! denied under `Fail`, skipped under `Ignore`), `auditAnnotations`, the `Warn` and `Audit`
//! actions, `matchPolicy: Equivalent` (matching is exact), the `authorizer` variable, CEL cost
//! budgets, type checking, and the status (`typeChecking`) kube-apiserver writes to a policy.

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

/// The configuration in force: the stored policies and bindings, and the namespace of the
/// request (`None` when it does not exist or the request is not namespaced).
pub struct Configuration<'a> {
    pub policies: Vec<&'a Value>,
    pub bindings: Vec<&'a Value>,
    pub namespace: Option<&'a Value>,
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

/// The decisions of one policy for one binding: the denials (an empty list admits).
fn evaluate(
    compiler: &Compiler,
    spec: &Value,
    failure: FailurePolicy,
    a: &Attributes<'_>,
    namespace: Option<&Value>,
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
            for binding in bindings
                .iter()
                .filter(|b| get_str(b, "spec.policyName") == Some(policy_name))
            {
                let binding_name = name_of(binding);
                let matches = match get_path(binding, "spec.matchResources") {
                    None | Some(Value::Null) => Ok(true),
                    Some(mr) => resources_match(mr, a, config.namespace),
                };
                let fail = failure == FailurePolicy::Fail;
                match matches {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(e) => {
                        if fail {
                            let message = format!("failed to configure binding: {}", e.message);
                            denied.push(config_error(Some(binding_name), message));
                        }
                        continue;
                    }
                }
                if get_path(&spec, "paramKind").is_some_and(|p| !p.is_null()) {
                    if fail {
                        let message = "failed to configure binding: params (paramKind, paramRef) \
                                       are not supported by apiserver-double"
                            .to_owned();
                        denied.push(config_error(Some(binding_name), message));
                    }
                    continue;
                }
                let denies = strings(get_path(binding, "spec.validationActions")).contains(&"Deny");
                if !denies {
                    continue;
                }
                for (message, reason) in
                    evaluate(&self.compiler, &spec, failure, a, config.namespace)
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
