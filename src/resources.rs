//! A container's cpu and memory as numbers: cpu in millicores, memory in bytes, as kubelet
//! computes them (`MilliValue` / `Value`, rounded up), read from a v1 `ResourceRequirements`
//! with Go's Quantity rules and written back in apimachinery's canonical form. Used by the
//! resize requests and checks, the node's allocatable and the node view.

use std::fmt;

use serde_json::{Map, Value};

use crate::quantity::{Quantity, go_trim_space};

pub(crate) const MILLI_PER_CPU: i64 = 1000;

/// cpu in millicores, memory in bytes; None = not set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_request: Option<i64>,
    pub cpu_limit: Option<i64>,
    pub memory_request: Option<i64>,
    pub memory_limit: Option<i64>,
}

/// A `ResourceRequirements` object that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResourceError {
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl ResourceError {
    pub(crate) fn new(field: &str, reason: impl Into<String>) -> Self {
        ResourceError::Invalid {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The two resources an in-place resize can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceName {
    Cpu,
    Memory,
}

impl ResourceName {
    pub(crate) fn key(self) -> &'static str {
        match self {
            ResourceName::Cpu => "cpu",
            ResourceName::Memory => "memory",
        }
    }

    /// The amount in kubelet's unit (millicores / bytes), rounded up like kubelet rounds.
    pub(crate) fn amount(self, q: &Quantity) -> Option<i64> {
        match self {
            ResourceName::Cpu => q.milli_value(),
            ResourceName::Memory => q.value(),
        }
    }

    /// How the API would print the amount (canonical quantity form).
    pub(crate) fn format(self, amount: i64) -> String {
        match self {
            ResourceName::Cpu => format_cpu(amount),
            ResourceName::Memory => format_memory(amount),
        }
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// One of the four values of [`Resources`], named as in the API (`requests.cpu`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceField {
    CpuRequest,
    CpuLimit,
    MemoryRequest,
    MemoryLimit,
}

impl ResourceField {
    pub(crate) const ALL: [ResourceField; 4] = [
        ResourceField::CpuRequest,
        ResourceField::CpuLimit,
        ResourceField::MemoryRequest,
        ResourceField::MemoryLimit,
    ];

    pub(crate) fn get(self, r: &Resources) -> Option<i64> {
        match self {
            ResourceField::CpuRequest => r.cpu_request,
            ResourceField::CpuLimit => r.cpu_limit,
            ResourceField::MemoryRequest => r.memory_request,
            ResourceField::MemoryLimit => r.memory_limit,
        }
    }
}

impl fmt::Display for ResourceField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResourceField::CpuRequest => "requests.cpu",
            ResourceField::CpuLimit => "limits.cpu",
            ResourceField::MemoryRequest => "requests.memory",
            ResourceField::MemoryLimit => "limits.memory",
        })
    }
}

impl Resources {
    /// From a v1 ResourceRequirements JSON object (`{"requests":{...},"limits":{...}}`); other
    /// resources are ignored; a bad quantity is a [`ResourceError`] naming the field.
    pub(crate) fn from_requirements(v: &Value) -> Result<Self, ResourceError> {
        let object = match v {
            Value::Null => return Ok(Resources::default()),
            Value::Object(o) => o,
            _ => return Err(ResourceError::new("resources", "must be an object")),
        };
        let requests = resource_list(object, "requests")?;
        let limits = resource_list(object, "limits")?;
        Ok(Resources {
            cpu_request: amount(requests, "requests", ResourceName::Cpu)?,
            cpu_limit: amount(limits, "limits", ResourceName::Cpu)?,
            memory_request: amount(requests, "requests", ResourceName::Memory)?,
            memory_limit: amount(limits, "limits", ResourceName::Memory)?,
        })
    }

    /// Back to a ResourceRequirements JSON object: cpu as `"500m"` / `"2"`, memory in the
    /// canonical binary-SI form (`"512Mi"`, or plain bytes when not a multiple of 1024); both are
    /// what apimachinery prints for these amounts and parse back to exactly the same values.
    /// Unset values are left out, and so are empty `requests` / `limits`.
    pub fn to_requirements(&self) -> Value {
        let list = |cpu: Option<i64>, memory: Option<i64>| {
            let mut m = Map::new();
            if let Some(c) = cpu {
                m.insert("cpu".into(), Value::String(format_cpu(c)));
            }
            if let Some(b) = memory {
                m.insert("memory".into(), Value::String(format_memory(b)));
            }
            m
        };
        let mut out = Map::new();
        let requests = list(self.cpu_request, self.memory_request);
        if !requests.is_empty() {
            out.insert("requests".into(), Value::Object(requests));
        }
        let limits = list(self.cpu_limit, self.memory_limit);
        if !limits.is_empty() {
            out.insert("limits".into(), Value::Object(limits));
        }
        Value::Object(out)
    }

    /// `self` with every value `desired` sets replaced (a value `desired` leaves unset keeps its
    /// value). Like API defaulting: when `desired` gives a limit and the request is unset in
    /// both, the request becomes that limit.
    pub fn overlay(&self, desired: &Resources) -> Resources {
        let pick = |new: Option<i64>, old: Option<i64>| new.or(old);
        let request = |new_req: Option<i64>, old_req: Option<i64>, new_lim: Option<i64>| {
            pick(new_req, old_req).or(new_lim)
        };
        Resources {
            cpu_request: request(desired.cpu_request, self.cpu_request, desired.cpu_limit),
            cpu_limit: pick(desired.cpu_limit, self.cpu_limit),
            memory_request: request(
                desired.memory_request,
                self.memory_request,
                desired.memory_limit,
            ),
            memory_limit: pick(desired.memory_limit, self.memory_limit),
        }
    }
}

fn resource_list<'v>(
    object: &'v Map<String, Value>,
    key: &str,
) -> Result<Option<&'v Map<String, Value>>, ResourceError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(list)) => Ok(Some(list)),
        Some(_) => Err(ResourceError::new(key, "must be an object")),
    }
}

fn amount(
    list: Option<&Map<String, Value>>,
    list_name: &str,
    resource: ResourceName,
) -> Result<Option<i64>, ResourceError> {
    let Some(v) = list.and_then(|l| l.get(resource.key())) else {
        return Ok(None);
    };
    let field = format!("{list_name}.{resource}");
    let q = parse_quantity(&field, v)?;
    let amount = resource
        .amount(&q)
        .ok_or_else(|| ResourceError::new(&field, "quantity is too large"))?;
    if amount < 0 {
        return Err(ResourceError::new(&field, "must not be negative"));
    }
    Ok(Some(amount))
}

/// A quantity as `Quantity.UnmarshalJSON` takes it: a string, a bare number, or null (zero).
pub(crate) fn parse_quantity(field: &str, v: &Value) -> Result<Quantity, ResourceError> {
    let text = match v {
        Value::Null => return Ok(Quantity::zero()),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(ResourceError::new(field, "must be a quantity string")),
    };
    Quantity::parse(go_trim_space(text.as_bytes()))
        .map_err(|e| ResourceError::new(field, format!("invalid quantity {text:?}: {e}")))
}

/// Millicores as apimachinery prints them: whole cores bare, anything else in `m`.
fn format_cpu(milli: i64) -> String {
    if milli % MILLI_PER_CPU == 0 {
        (milli / MILLI_PER_CPU).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Bytes in canonical binary-SI form (apimachinery's BinarySI printing for integers).
fn format_memory(bytes: i64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut mantissa = bytes;
    let mut times = 0;
    while mantissa != 0 && mantissa % 1024 == 0 && times < SUFFIXES.len() - 1 {
        mantissa /= 1024;
        times += 1;
    }
    format!("{mantissa}{}", SUFFIXES[times])
}
