//! Label selectors (equality and set-based) and field selectors.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;
use crate::util::get_path;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Split on commas that are not inside `(...)`.
fn split_terms(s: &str) -> ApiResult<Vec<&str>> {
    let mut out = vec![];
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: unbalanced parentheses in {s:?}"
            )));
        }
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_set(rest: &str, whole: &str) -> ApiResult<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected '(' ... ')' in {whole:?}"
            ))
        })?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    if vals.is_empty() || !vals.iter().all(|v| valid_value(v)) {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid value set in {whole:?}"
        )));
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = vec![];
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        let bad = |t: &str| ApiError::bad_request(format!("unable to parse requirement: {t:?}"));
        for term in split_terms(s)? {
            let t = term.trim();
            if t.is_empty() {
                return Err(bad(t));
            }
            let req = if let Some(k) = t.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("!=") {
                LabelReq::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("==") {
                LabelReq::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = t.split_once('=') {
                LabelReq::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                LabelReq::NotIn(k.trim().to_owned(), parse_set(rest, t)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                LabelReq::In(k.trim().to_owned(), parse_set(rest, t)?)
            } else {
                LabelReq::Exists(t.to_owned())
            };
            let ok = match &req {
                LabelReq::Eq(k, v) | LabelReq::NotEq(k, v) => valid_key(k) && valid_value(v),
                LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => valid_key(k),
            };
            if !ok {
                return Err(bad(t));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = get_path(obj, "metadata.labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            // As in Kubernetes, `!=` and `notin` also match objects without the label.
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: only `=`, `==`, `!=` on the fields the resource supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str, def: &ResourceDef) -> ApiResult<Self> {
        let mut reqs = vec![];
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            let supported = field == "metadata.name"
                || (field == "metadata.namespace" && def.namespaced)
                || def.field_selectors.iter().any(|f| f == field);
            if !supported {
                // Same wording as the real server's field label conversion error.
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_owned(), eq, value.trim().to_owned()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            // Unset fields compare as the empty string, like the real field sets.
            let have = match get_path(obj, field) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Null) | None => match field.as_str() {
                    "spec.unschedulable" | "spec.hostNetwork" => "false".into(),
                    _ => String::new(),
                },
                Some(other) => other.to_string(),
            };
            (have == *want) == *eq
        })
    }

    /// Add an `=` term (a watch on a single object path pins its name this way).
    pub fn require(&mut self, field: &str, value: &str) {
        self.0.push((field.to_owned(), true, value.to_owned()));
    }
}

/// Label and field selector together, plus the namespace of the request path.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && crate::util::namespace_of(obj) != ns
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_forms() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&p);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(m("missing!=x"));
        assert!(m("missing notin (x)"));
        assert!(!m("missing in (x)"));
        assert!(m(""));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("app=web,").is_err());
    }

    #[test]
    fn field_selector_forms() {
        let defs = crate::resources::default_resources();
        let pods = &defs[0];
        let p = pod(json!({}));
        assert!(
            FieldSelector::parse("spec.nodeName=n1", pods)
                .unwrap()
                .matches(&p)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName!=n1", pods)
                .unwrap()
                .matches(&p)
        );
        assert!(
            FieldSelector::parse("status.phase=", pods)
                .unwrap()
                .matches(&p)
        );
        let e = FieldSelector::parse("spec.bogus=1", pods).unwrap_err();
        assert_eq!(e.code, 400);
    }
}
