//! Errors as the API server reports them: `metav1.Status` objects with a code and reason.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// An error answer. Turned into a `Status` body by [`ApiError::to_status`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
    /// Sent as a `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
    /// Answered as kube-apiserver's catch-all handler answers a path nothing serves (a custom
    /// resource whose CRD is absent, a group or version not served): `404 page not found` as
    /// plain text, no Status (kube-rs reports it with reason "Failed to parse error data").
    pub plain_text: bool,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
            retry_after: None,
            plain_text: false,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `NotFound` for an object; `details.kind` is the resource plural, as the real server sends.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", def.qualified()),
        )
        .with_details(def.details(name))
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// What kube-apiserver answers for a path no handler serves (see [`ApiError::plain_text`]).
    pub fn page_not_found() -> Self {
        ApiError {
            plain_text: true,
            ..Self::new(404, "NotFound", "404 page not found")
        }
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.qualified()),
        )
        .with_details(def.details(name))
    }

    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                def.qualified()
            ),
        )
        .with_details(def.details(name))
    }

    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid` with one field cause, formatted like the real validation errors.
    pub fn invalid(def: &ResourceDef, name: &str, field: &str, cause: &str) -> Self {
        let mut details = def.details(name);
        details["kind"] = json!(def.kind);
        details["causes"] =
            json!([{ "reason": "FieldValueInvalid", "message": cause, "field": field }]);
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {cause}", def.kind),
        )
        .with_details(details)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// A bare error of the given code with the reason the real server uses for it.
    pub fn from_code(code: u16, message: Option<&str>) -> Self {
        let (reason, default_msg) = match code {
            400 => ("BadRequest", "bad request"),
            401 => ("Unauthorized", "Unauthorized"),
            403 => ("Forbidden", "forbidden"),
            404 => ("NotFound", "not found"),
            405 => ("MethodNotAllowed", "method not allowed"),
            409 => ("Conflict", "conflict"),
            410 => ("Expired", "too old resource version"),
            422 => ("Invalid", "invalid"),
            429 => (
                "TooManyRequests",
                "Too many requests, please try again later.",
            ),
            500 => ("InternalError", "Internal error occurred: injected fault"),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            _ => ("Unknown", "injected fault"),
        };
        Self::new(code, reason, message.unwrap_or(default_msg))
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = self.details.clone();
        if let Some(secs) = self.retry_after {
            let d = details.get_or_insert_with(|| json!({}));
            d["retryAfterSeconds"] = json!(secs);
        }
        if let Some(d) = details {
            s["details"] = d;
        }
        s
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
