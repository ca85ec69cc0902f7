//! The v1.Container schema as data: per struct, its JSON field names, the kubelet release that
//! introduced each field, and which JSON each field accepts. `container.rs` declares it (beside
//! the decoder of each struct, in one `fields!` list) and uses it for field lookup; era C uses
//! it to validate without decoding ([`check`]).
//!
//! Decisions:
//! - Field lookup (Go: exact name first, then case-insensitive with Unicode simple folding) goes
//!   through a small perfect hash on (length, first byte, last byte), built at compile time; a
//!   collision is a compile error. Folding is the rare path and stays a linear scan.
//! - [`check`] accepts and rejects exactly what the decoder accepts and rejects, built from the
//!   same [`super::json::Parser`] steps, but stores nothing and allocates only for keys that
//!   need unescaping. Tests compare both on every golden input and on mutated inputs.

use super::json::{DResult, Parser, quantity_error};
use super::quantity;

/// What JSON a field accepts (every kind also accepts `null`).
#[derive(Debug)]
pub enum Kind {
    Str,
    Bool,
    /// An integer literal within `min..=max` (Go's int32/int64).
    Int {
        min: i64,
        max: i64,
        name: &'static str,
    },
    /// intstr.IntOrString: a string or an int32.
    IntOrStr,
    /// resource.Quantity: a string, number or boolean literal that parses as a quantity.
    Quantity,
    /// map[ResourceName]Quantity.
    ResourceList,
    List(&'static Kind),
    /// A struct (value or pointer: both accept an object or null).
    Object(&'static Schema),
}

pub const I32: Kind = Kind::Int {
    min: I32_MIN,
    max: I32_MAX,
    name: "int32",
};
pub const I64: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
    name: "int64",
};

#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    /// First kubelet minor release that knows the field.
    pub since: u32,
    pub kind: Kind,
}

#[derive(Debug)]
pub struct Schema {
    pub fields: &'static [Field],
    /// Perfect hash slot → field index + 1 (0: empty).
    slots: [u8; SLOTS],
}

const SLOTS: usize = 128;

#[inline(always)]
const fn slot(len: usize, first: u8, last: u8) -> usize {
    (len.wrapping_mul(2) + (last as usize) * 21 + first as usize) % SLOTS
}

impl Schema {
    pub const fn new(fields: &'static [Field]) -> Schema {
        let mut slots = [0u8; SLOTS];
        let mut i = 0;
        while i < fields.len() {
            let n = fields[i].name.as_bytes();
            let s = slot(n.len(), n[0], n[n.len() - 1]);
            assert!(slots[s] == 0, "field lookup hash collision: change `slot`");
            slots[s] = (i + 1) as u8;
            i += 1;
        }
        Schema { fields, slots }
    }

    /// Position of a field by name (for the decoder's dispatch, evaluated at compile time).
    pub const fn index_of(&self, name: &str) -> usize {
        let mut i = 0;
        while i < self.fields.len() {
            let f = self.fields[i].name.as_bytes();
            let n = name.as_bytes();
            if f.len() == n.len() {
                let mut j = 0;
                while j < n.len() && f[j] == n[j] {
                    j += 1;
                }
                if j == n.len() {
                    return i;
                }
            }
            i += 1;
        }
        panic!("no such field")
    }

    /// The field a (decoded) object key selects in release `minor`, as Go's decoder picks it.
    #[inline]
    pub fn lookup(&self, key: &[u8], minor: u32) -> Option<usize> {
        let (&first, &last) = (key.first()?, key.last()?);
        let exact = match self.slots[slot(key.len(), first, last)] {
            0 => None,
            i => Some(usize::from(i) - 1)
                .filter(|&i| same_bytes(self.fields[i].name.as_bytes(), key)),
        };
        let i = exact.or_else(|| self.fold_lookup(key))?;
        (self.fields[i].since <= minor).then_some(i)
    }

    /// Case-insensitive match with Go's simple folding. Field names are ASCII letters, and the
    /// only non-ASCII runes that fold onto ASCII letters are U+017F (ſ, to s) and U+212A (Kelvin
    /// sign, to k).
    #[cold]
    fn fold_lookup(&self, key: &[u8]) -> Option<usize> {
        let mut folded = [0u8; 48];
        let mut n = 0;
        let mut i = 0;
        while i < key.len() {
            let c = key[i];
            let (f, adv) = if c < 0x80 {
                (c.to_ascii_lowercase(), 1)
            } else if key[i..].starts_with("\u{17f}".as_bytes()) {
                (b's', 2)
            } else if key[i..].starts_with("\u{212a}".as_bytes()) {
                (b'k', 3)
            } else {
                return None;
            };
            *folded.get_mut(n)? = f;
            n += 1;
            i += adv;
        }
        let folded = &folded[..n];
        self.fields
            .iter()
            .position(|f| f.name.len() == n && f.name.as_bytes().eq_ignore_ascii_case(folded))
    }
}

/// `a == b` for short strings, inline (a library `memcmp` call costs more than the compare).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let half = |s: &[u8], at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_le_bytes(w)
    };
    match n {
        // Overlapping first and last words cover the rest.
        8.. => {
            let mut i = 0;
            while i + 8 < n {
                if word(a, i) != word(b, i) {
                    return false;
                }
                i += 8;
            }
            word(a, n - 8) == word(b, n - 8)
        }
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a.iter().zip(b).all(|(x, y)| x == y),
    }
}

/// Validates one value of `kind` exactly as the decoder would decode it (release `minor`).
/// Scalars are checked inline; objects, lists and quantities in [`check_nested`].
#[inline(always)]
pub fn check(p: &mut Parser<'_>, kind: &Kind, minor: u32) -> DResult<()> {
    let c = p.peek_value()?;
    match (kind, c) {
        // Every kind accepts null (a syntax error if it is not exactly `null`).
        (_, b'n') => p.literal().map(drop),
        (Kind::Str | Kind::IntOrStr, b'"') => p.string_raw().map(drop),
        (Kind::Str, _) => p.type_error("string"),
        (Kind::Bool, b't' | b'f') => p.literal().map(drop),
        (Kind::Bool, _) => p.type_error("bool"),
        (Kind::Int { min, max, name }, _) => p.int(*min, *max, name).map(drop),
        (Kind::IntOrStr, _) => p.int(I32_MIN, I32_MAX, "int32").map(drop),
        _ => check_nested(p, kind, c, minor),
    }
}

const I32_MIN: i64 = i32::MIN as i64;
const I32_MAX: i64 = i32::MAX as i64;

/// [`check`] of a non-null quantity, resource list, list or object starting with `c`.
fn check_nested(p: &mut Parser<'_>, kind: &Kind, c: u8, minor: u32) -> DResult<()> {
    match kind {
        Kind::Quantity => {
            let at = p.offset();
            let text = match c {
                b'"' => quantity::go_trim_space(p.string_raw()?),
                b'-' | b'0'..=b'9' => p.number()?,
                b't' | b'f' => p.literal()?,
                _ => return p.type_error("quantity"),
            };
            quantity::validate(text).or_else(|e| quantity_error(text, e, at))
        }
        Kind::ResourceList => match c {
            b'{' => {
                p.begin_object()?;
                let mut first = true;
                while p.next_key_raw(&mut first)?.is_some() {
                    check(p, &Kind::Quantity, minor)?;
                }
                Ok(())
            }
            _ => p.type_error("object"),
        },
        Kind::List(elem) => match c {
            b'[' => {
                p.begin_array()?;
                let mut first = true;
                while p.next_elem(&mut first)? {
                    check(p, elem, minor)?;
                }
                Ok(())
            }
            _ => p.type_error("array"),
        },
        Kind::Object(schema) => match c {
            b'{' => check_fields(p, schema, minor, |_, _| Ok(false)),
            _ => p.type_error("object"),
        },
        Kind::Str | Kind::Bool | Kind::Int { .. } | Kind::IntOrStr => check(p, kind, minor),
    }
}

/// Validates an object (positioned at `{`) of `schema`. `take(p, field)` may consume a field's
/// value itself (returning true) instead of it being checked.
pub fn check_fields<'a>(
    p: &mut Parser<'a>,
    schema: &Schema,
    minor: u32,
    mut take: impl FnMut(&mut Parser<'a>, usize) -> DResult<bool>,
) -> DResult<()> {
    p.begin_object()?;
    let mut first = true;
    while let Some(field) = p.next_key_with(&mut first, |key| schema.lookup(key, minor))? {
        match field {
            Some(i) => {
                if !take(p, i)? {
                    check(p, &schema.fields[i].kind, minor)?;
                }
            }
            None => p.skip_value()?,
        }
    }
    Ok(())
}

/// [`check`] must accept and reject exactly what the decoder does, and leave the same name and
/// image: on every golden input, on mutations of them, and on generated documents.
#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::super::container::{Ctx, check_name_image, decode};

    const MINORS: [u32; 5] = [16, 26, 30, 33, 37];

    /// Both verdicts agree (the decoder as era C runs it), with equal names and images when
    /// accepted.
    fn same_verdict(input: &[u8]) -> Result<(), String> {
        for minor in MINORS {
            let fast = check_name_image(input, minor);
            let full = decode(
                input,
                &Ctx {
                    minor,
                    need_output: false,
                },
            );
            let agree = match (&fast, &full) {
                (Ok((name, image)), Ok(c)) => *name == c.name && *image == c.image,
                (Err(_), Err(_)) => true,
                _ => false,
            };
            if !agree {
                return Err(format!(
                    "1.{minor}: check {:?} vs decode {:?} for {:?}",
                    fast.as_ref().map(|_| ()),
                    full.as_ref().map(|_| ()),
                    String::from_utf8_lossy(input)
                ));
            }
        }
        Ok(())
    }

    fn golden_inputs() -> Vec<Vec<u8>> {
        let dir = std::env::var_os("INPLACED_GOLDEN_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/golden"));
        let text = std::fs::read_to_string(dir.join("kubelet-1.36.3.jsonl")).unwrap_or_else(|e| {
            panic!(
                "golden inputs in {} (INPLACED_GOLDEN_DIR): {e}",
                dir.display()
            )
        });
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("golden line");
                v["input_text"]
                    .as_str()
                    .expect("input_text")
                    .as_bytes()
                    .to_vec()
            })
            .collect()
    }

    #[test]
    fn golden_inputs_and_mutations() {
        let inputs = golden_inputs();
        assert!(inputs.len() >= 553);
        let mut checked = 0;
        for (n, input) in inputs.iter().enumerate() {
            same_verdict(input).unwrap();
            // Deterministic mutations: truncations, and bytes that change the structure or the
            // type of a value, at positions spread over the input.
            let step = (input.len() / 24).max(1);
            for (k, at) in (0..input.len()).step_by(step).enumerate() {
                let mut cut = input.clone();
                cut.truncate(at);
                same_verdict(&cut).unwrap();
                for b in [
                    b'"', b'}', b']', b'n', b'1', b'-', b'{', b'[', b't', b'\\', b'.', b'e',
                ] {
                    if (n + k + usize::from(b)) % 3 != 0 {
                        continue;
                    }
                    let mut m = input.clone();
                    m[at] = b;
                    same_verdict(&m).unwrap();
                    checked += 1;
                }
            }
        }
        assert!(checked > 20_000, "{checked} mutations");
    }

    /// Keys from the schema (in several spellings) and values of every JSON type.
    fn document() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "name",
            "image",
            "NAME",
            "Image",
            "nam\\u0065",
            "ports",
            "containerPort",
            "hostPort",
            "env",
            "value",
            "valueFrom",
            "fieldRef",
            "resourceFieldRef",
            "divisor",
            "resources",
            "limits",
            "requests",
            "claims",
            "request",
            "livenessProbe",
            "httpGet",
            "port",
            "tcpSocket",
            "grpc",
            "service",
            "exec",
            "command",
            "args",
            "securityContext",
            "runAsUser",
            "privileged",
            "capabilities",
            "add",
            "restartPolicyRules",
            "exitCodes",
            "values",
            "lifecycle",
            "preStop",
            "sleep",
            "seconds",
            "stopSignal",
            "fileKeyRef",
            "resizePolicy",
            "volumeMounts",
            "readOnly",
            "recursiveReadOnly",
            "tty",
            "unknown",
            "termination\u{17f}",
            "\u{212a}ey",
            "key",
            "optional",
            "seccompProfile",
            "type",
        ]);
        let leaf = prop::sample::select(vec![
            "null",
            "true",
            "false",
            "nul",
            "0",
            "-1",
            "1.5",
            "1e3",
            "2147483648",
            "-2147483649",
            "9223372036854775808",
            "\"\"",
            "\"x\"",
            "\"1Gi\"",
            "\" 1m \"",
            "\"abc\"",
            "\"\\u00e9\"",
            "\"1\\u0030\"",
            "{}",
            "[]",
            "[null]",
            "{\"a\":1}",
        ])
        .prop_map(str::to_owned);
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| {
                    let fields: Vec<String> = kv
                        .into_iter()
                        .map(|(k, v)| format!("\"{k}\":{v}"))
                        .collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn generated_documents(doc in document()) {
            prop_assert!(same_verdict(doc.as_bytes()).is_ok(), "{}", same_verdict(doc.as_bytes()).unwrap_err());
        }
    }
}
