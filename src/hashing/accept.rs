//! Era C's fast path: accepts a v1.Container JSON that Go's decoder accepts, reading it once,
//! and gives up (`None`) on anything else. Giving up is never an answer: the caller then asks
//! the decoder, which accepts or rejects exactly as Go does and says why.
//!
//! Decisions:
//! - Accept-only. Every reason to give up (a syntax or type error, a key with escapes or
//!   invalid UTF-8, an unknown field nested deeper than [`SKIP_DEPTH`]) costs nothing on the
//!   usual path, and no error value is built or carried.
//! - Words, not bytes: strings are scanned eight bytes at a time, and a key's first 16 bytes are
//!   compared as two words with the field's name ([`Schema::lookup_words`]), so most keys are
//!   matched without a byte loop.
//! - Positions are plain indices; a read past the end sees zero bytes, which no token accepts,
//!   so the end of the input needs no check of its own.

use std::borrow::Cow;

use super::json::{HIGHS, decoding_changes, string_marks, unquote};
use super::schema::{Kind, Schema};
use crate::quantity;

/// Nesting allowed inside an unknown field before giving up (Go allows 10000 in all; the
/// decoder handles deeper input).
const SKIP_DEPTH: u32 = 64;

/// Eight bytes from `p`, little-endian; zero beyond the end.
#[inline(always)]
fn word(s: &[u8], p: usize) -> u64 {
    match s.get(p..p + 8) {
        Some(chunk) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            u64::from_le_bytes(w)
        }
        None => tail_word(s, p),
    }
}

#[cold]
fn tail_word(s: &[u8], p: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(rest) = s.get(p..) {
        let n = rest.len().min(8);
        w[..n].copy_from_slice(&rest[..n]);
    }
    u64::from_le_bytes(w)
}

#[inline(always)]
fn byte(s: &[u8], p: usize) -> u8 {
    s.get(p).copied().unwrap_or(0)
}

#[inline(always)]
fn ws(s: &[u8], mut p: usize) -> usize {
    // Every token starts above the space; whitespace is Go's four bytes.
    while byte(s, p) <= b' ' && matches!(byte(s, p), b' ' | b'\n' | b'\r' | b'\t') {
        p += 1;
    }
    p
}

/// A scanned string: where its closing quote is, and what it contains.
struct Scanned {
    end: usize,
    escaped: bool,
    non_ascii: bool,
}

struct Walk<'a> {
    s: &'a [u8],
    minor: u32,
}

impl<'a> Walk<'a> {
    /// A string whose opening quote is at `p - 1`; escapes are checked as Go's scanner does.
    #[inline(always)]
    fn string(&self, mut p: usize) -> Option<Scanned> {
        let mut high = 0;
        let mut escaped = false;
        loop {
            let w = word(self.s, p);
            let (quote, special) = string_marks(w);
            if special == 0 {
                high |= w;
                p += 8;
                continue;
            }
            let first = special & special.wrapping_neg();
            let at = p + (first.trailing_zeros() / 8) as usize;
            high |= w & (first - 1);
            if first & quote != 0 {
                return Some(Scanned {
                    end: at,
                    escaped,
                    non_ascii: high & HIGHS != 0,
                });
            }
            if byte(self.s, at) != b'\\' {
                // A control byte, or the end of the input.
                return None;
            }
            escaped = true;
            p = self.escape(at)?;
        }
    }

    /// The escape whose backslash is at `at`; the position after it.
    #[inline(never)]
    fn escape(&self, at: usize) -> Option<usize> {
        match byte(self.s, at + 1) {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 2),
            b'u' => (2..6)
                .all(|i| byte(self.s, at + i).is_ascii_hexdigit())
                .then_some(at + 6),
            _ => None,
        }
    }

    /// `true`, `false` or `null` at `p` (already known to start with its first letter).
    #[inline(always)]
    fn literal(&self, p: usize, text: &[u8]) -> Option<usize> {
        let n = text.len();
        let mask = u64::MAX >> (64 - 8 * n);
        let mut want = [0u8; 8];
        want[..n].copy_from_slice(text);
        (word(self.s, p) & mask == u64::from_le_bytes(want)).then_some(p + n)
    }

    /// A number at `p`, by JSON's grammar; the position after it.
    #[inline(always)]
    fn number(&self, p: usize) -> Option<usize> {
        let s = self.s;
        let digit = |q: usize| byte(s, q).is_ascii_digit();
        let mut q = p + usize::from(byte(s, p) == b'-');
        match byte(s, q) {
            b'0' => q += 1,
            b'1'..=b'9' => {
                q += 1;
                while digit(q) {
                    q += 1;
                }
            }
            _ => return None,
        }
        if byte(s, q) == b'.' {
            q += 1;
            if !digit(q) {
                return None;
            }
            while digit(q) {
                q += 1;
            }
        }
        if matches!(byte(s, q), b'e' | b'E') {
            q += 1;
            if matches!(byte(s, q), b'+' | b'-') {
                q += 1;
            }
            if !digit(q) {
                return None;
            }
            while digit(q) {
                q += 1;
            }
        }
        Some(q)
    }

    /// An integer literal within `min..=max` at `p` (a fraction or an exponent is a type
    /// error in Go, so it is not an integer here either).
    #[inline(always)]
    fn int(&self, p: usize, min: i64, max: i64) -> Option<usize> {
        let s = self.s;
        let neg = byte(s, p) == b'-';
        let mut q = p + usize::from(neg);
        let mut v: u64 = 0;
        match byte(s, q) {
            b'0' => q += 1,
            b'1'..=b'9' => {
                while let d @ b'0'..=b'9' = byte(s, q) {
                    v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    q += 1;
                }
            }
            _ => return None,
        }
        if matches!(byte(s, q), b'.' | b'e' | b'E') {
            return None;
        }
        let v = if neg {
            0i64.checked_sub_unsigned(v)?
        } else {
            i64::try_from(v).ok()?
        };
        (min <= v && v <= max).then_some(q)
    }

    /// One value of `kind` at `p` (whitespace skipped); the position after it.
    #[inline(always)]
    fn value(&self, p: usize, kind: &Kind) -> Option<usize> {
        let c = byte(self.s, p);
        if c == b'n' {
            return self.literal(p, b"null");
        }
        match kind {
            Kind::Str => (c == b'"').then_some(())?,
            Kind::IntOrStr if c == b'"' => {}
            Kind::IntOrStr => return self.int(p, i32::MIN.into(), i32::MAX.into()),
            Kind::Bool => {
                return match c {
                    b't' => self.literal(p, b"true"),
                    b'f' => self.literal(p, b"false"),
                    _ => None,
                };
            }
            Kind::Int { min, max } => return self.int(p, *min, *max),
            _ => return self.nested(p, kind, c),
        }
        Some(self.string(p + 1)?.end + 1)
    }

    /// [`Walk::value`] of a quantity, resource list, list or object.
    fn nested(&self, p: usize, kind: &Kind, c: u8) -> Option<usize> {
        let s = self.s;
        match (kind, c) {
            (Kind::Quantity, _) => {
                let (text, end) = match c {
                    b'"' => {
                        let end = self.string(p + 1)?.end;
                        (quantity::go_trim_space(self.s.get(p + 1..end)?), end + 1)
                    }
                    b'-' | b'0'..=b'9' => {
                        let end = self.number(p)?;
                        (self.s.get(p..end)?, end)
                    }
                    b't' => (self.s.get(p..self.literal(p, b"true")?)?, p + 4),
                    b'f' => (self.s.get(p..self.literal(p, b"false")?)?, p + 5),
                    _ => return None,
                };
                quantity::validate(text).ok()?;
                Some(end)
            }
            (Kind::ResourceList, b'{') => self.members(p, |w, p| {
                let key_end = w.string(p + 1)?.end;
                let p = w.colon(key_end + 1)?;
                w.value(p, &Kind::Quantity)
            }),
            (Kind::List(elem), b'[') => {
                let mut p = ws(s, p + 1);
                if byte(s, p) == b']' {
                    return Some(p + 1);
                }
                loop {
                    p = ws(s, self.value(p, elem)?);
                    match byte(s, p) {
                        b',' => p = ws(s, p + 1),
                        b']' => return Some(p + 1),
                        _ => return None,
                    }
                }
            }
            (Kind::Object(schema), b'{') => self.object(p, schema, |_, _, _| Some(None)),
            _ => None,
        }
    }

    /// After a key's closing quote at `p - 1`: the colon and the whitespace around it.
    #[inline(always)]
    fn colon(&self, p: usize) -> Option<usize> {
        let p = ws(self.s, p);
        (byte(self.s, p) == b':').then(|| ws(self.s, p + 1))
    }

    /// An object at `p` (its `{`), each member read by `member(self, p)` from its key's opening
    /// quote to the end of its value.
    #[inline(always)]
    fn members(
        &self,
        p: usize,
        mut member: impl FnMut(&Self, usize) -> Option<usize>,
    ) -> Option<usize> {
        let s = self.s;
        let mut p = ws(s, p + 1);
        if byte(s, p) == b'}' {
            return Some(p + 1);
        }
        loop {
            if byte(s, p) != b'"' {
                return None;
            }
            p = ws(s, member(self, p)?);
            match byte(s, p) {
                b',' => p = ws(s, p + 1),
                b'}' => return Some(p + 1),
                _ => return None,
            }
        }
    }

    /// An object of `schema` at `p`. `take(self, field, p)` may read a field's value itself
    /// (`Some(Some(end))`) instead of it being checked (`Some(None)`).
    #[inline(always)]
    fn object(
        &self,
        p: usize,
        schema: &Schema,
        mut take: impl FnMut(&Self, usize, usize) -> Option<Option<usize>>,
    ) -> Option<usize> {
        self.members(p, |w, p| {
            let (key_end, field) = w.key(p, schema)?;
            let p = w.colon(key_end + 1)?;
            match field {
                Some(i) => match take(w, i, p)? {
                    Some(end) => Some(end),
                    None => w.value(p, &schema.fields.get(i)?.kind),
                },
                None => w.skip(p, 0),
            }
        })
    }

    /// The key whose opening quote is at `p`: its closing quote's position and the field it
    /// selects (`None`: unknown to this release).
    #[inline(always)]
    fn key(&self, p: usize, schema: &Schema) -> Option<(usize, Option<usize>)> {
        let s = self.s;
        // The key's bytes below its closing quote, if the first mark of `w` is that quote.
        let below_quote = |w: u64, special: u64, quote: u64| {
            let first = special & special.wrapping_neg();
            (first & quote != 0).then(|| {
                (
                    (first.trailing_zeros() / 8) as usize,
                    w & ((first >> 7) - 1),
                )
            })
        };
        let w0 = word(s, p + 1);
        let (q0, sp0) = string_marks(w0);
        let (end, words) = if sp0 != 0 {
            let (n, w0) = below_quote(w0, sp0, q0)?;
            (p + 1 + n, [w0, 0])
        } else {
            let w1 = word(s, p + 9);
            let (q1, sp1) = string_marks(w1);
            if sp1 != 0 {
                let (n, w1) = below_quote(w1, sp1, q1)?;
                (p + 9 + n, [w0, w1])
            } else {
                let sc = self.string(p + 17)?;
                if sc.escaped {
                    return None;
                }
                (sc.end, [w0, w1 | (u64::from(sc.non_ascii) << 63)])
            }
        };
        let len = end - (p + 1);
        let field = if (words[0] | words[1]) & HIGHS == 0 {
            let rest = if len > 16 {
                self.s.get(p + 17..end)?
            } else {
                &[]
            };
            match schema.lookup_words(words, len, rest, self.minor) {
                Some(field) => field,
                None => schema.lookup_folded(self.s.get(p + 1..end)?, self.minor),
            }
        } else {
            let key = self.s.get(p + 1..end)?;
            if simdutf8::basic::from_utf8(key).is_err() {
                // Decoded (invalid UTF-8 replaced) before Go matches it: the decoder's business.
                return None;
            }
            // Folded onto an ASCII name, or unknown.
            schema.lookup(key, self.minor)
        };
        Some((end, field))
    }

    /// Any JSON value at `p`, validated; nested at most [`SKIP_DEPTH`] deep.
    fn skip(&self, p: usize, depth: u32) -> Option<usize> {
        let s = self.s;
        match byte(s, p) {
            b'"' => Some(self.string(p + 1)?.end + 1),
            b'{' if depth < SKIP_DEPTH => self.members(p, |w, p| {
                let key_end = w.string(p + 1)?.end;
                let p = w.colon(key_end + 1)?;
                w.skip(p, depth + 1)
            }),
            b'[' if depth < SKIP_DEPTH => {
                let mut p = ws(s, p + 1);
                if byte(s, p) == b']' {
                    return Some(p + 1);
                }
                loop {
                    p = ws(s, self.skip(p, depth + 1)?);
                    match byte(s, p) {
                        b',' => p = ws(s, p + 1),
                        b']' => return Some(p + 1),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(p, b"true"),
            b'f' => self.literal(p, b"false"),
            b'n' => self.literal(p, b"null"),
            b'-' | b'0'..=b'9' => self.number(p),
            _ => None,
        }
    }

    /// A string field's value at `p` into `out` as Go decodes it (null leaves it unchanged).
    fn take_str(&self, p: usize, out: &mut Cow<'a, [u8]>) -> Option<usize> {
        match byte(self.s, p) {
            b'"' => {
                let sc = self.string(p + 1)?;
                let raw = self.s.get(p + 1..sc.end)?;
                *out = if decoding_changes(raw, sc.escaped, sc.non_ascii) {
                    Cow::Owned(unquote(raw))
                } else {
                    Cow::Borrowed(raw)
                };
                Some(sc.end + 1)
            }
            b'n' => self.literal(p, b"null"),
            _ => None,
        }
    }
}

/// A container's decoded `name` and `image`.
pub(crate) type NameImage<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// The decoded `name` and `image` of a container JSON (fields `name_field` and `image_field` of
/// `schema`) if Go's decoder accepts it for release `minor`; `None` when it does not, or when
/// this reader leaves the answer to the decoder.
pub(crate) fn name_image<'a>(
    src: &'a [u8],
    schema: &Schema,
    name_field: usize,
    image_field: usize,
    minor: u32,
) -> Option<NameImage<'a>> {
    let w = Walk { s: src, minor };
    let (mut name, mut image) = (Cow::Borrowed(&b""[..]), Cow::Borrowed(&b""[..]));
    let p = ws(src, 0);
    if byte(src, p) != b'{' {
        return None;
    }
    let end = w.object(p, schema, |w, field, p| {
        if field == name_field {
            w.take_str(p, &mut name).map(Some)
        } else if field == image_field {
            w.take_str(p, &mut image).map(Some)
        } else {
            Some(None)
        }
    })?;
    (ws(src, end) == src.len()).then_some((name, image))
}

/// The reader must never accept what the decoder rejects, must leave the same name and image,
/// and must answer for every golden input Go accepts: checked on the golden inputs, on
/// mutations of them, and on generated documents.
#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::container::{Purpose, accept_name_image, with_decoded};

    const MINORS: [u32; 5] = [16, 26, 30, 33, 37];

    /// What the reader said of `input`, checked against the decoder (as era C runs it).
    #[derive(Debug, PartialEq)]
    enum Verdict {
        /// Both accept, with equal names and images.
        Accepted,
        /// Both reject.
        Rejected,
        /// The decoder accepts; the reader gave up.
        Left,
    }

    /// The reader's verdict for every release of [`MINORS`], or the contradiction found.
    fn verdicts(input: &[u8]) -> Result<Vec<Verdict>, String> {
        MINORS
            .iter()
            .map(|&minor| {
                let full = with_decoded(input, minor, Purpose::Check, |c| {
                    (c.name.to_vec(), c.image.to_vec())
                });
                match (accept_name_image(input, minor), &full) {
                    (Some((name, image)), Ok((n, i))) if *name == **n && *image == **i => {
                        Ok(Verdict::Accepted)
                    }
                    (None, Err(_)) => Ok(Verdict::Rejected),
                    (None, Ok(_)) => Ok(Verdict::Left),
                    (accepted, _) => Err(format!(
                        "1.{minor}: reader {:?} vs decoder {:?} for {:?}",
                        accepted,
                        full.as_ref()
                            .map(|(n, i)| (String::from_utf8_lossy(n), String::from_utf8_lossy(i))),
                        String::from_utf8_lossy(input)
                    )),
                }
            })
            .collect()
    }

    fn golden_inputs() -> Vec<Vec<u8>> {
        let dir = node_sandbox::golden::golden_dir();
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

    /// The accept-only reader answers for every golden input Go accepts (so the fast path is
    /// taken, and not silently left to the decoder).
    #[test]
    fn accept_only_reader_answers_for_the_golden_inputs() {
        let mut left = Vec::new();
        for input in golden_inputs() {
            if with_decoded(&input, 36, Purpose::Check, |_| ()).is_ok()
                && accept_name_image(&input, 36).is_none()
            {
                left.push(String::from_utf8_lossy(&input).into_owned());
            }
        }
        assert!(
            left.is_empty(),
            "{} left to the decoder: {left:#?}",
            left.len()
        );
    }

    #[test]
    fn golden_inputs_and_mutations() {
        let inputs = golden_inputs();
        assert!(inputs.len() >= 553);
        let (mut checked, mut left, mut accepted) = (0, 0, 0);
        let mut count = |input: &[u8]| {
            for v in verdicts(input).unwrap() {
                checked += 1;
                match v {
                    Verdict::Accepted => accepted += 1,
                    Verdict::Left => left += 1,
                    Verdict::Rejected => {}
                }
            }
        };
        for (n, input) in inputs.iter().enumerate() {
            count(input);
            // Deterministic mutations: truncations, and bytes that change the structure or the
            // type of a value, at positions spread over the input.
            let step = (input.len() / 24).max(1);
            for (k, at) in (0..input.len()).step_by(step).enumerate() {
                let mut cut = input.clone();
                cut.truncate(at);
                count(&cut);
                for b in [
                    b'"', b'}', b']', b'n', b'1', b'-', b'{', b'[', b't', b'\\', b'.', b'e',
                ] {
                    if (n + k + usize::from(b)) % 3 != 0 {
                        continue;
                    }
                    let mut m = input.clone();
                    m[at] = b;
                    count(&m);
                }
            }
        }
        assert!(checked > 100_000, "{checked} verdicts");
        // Giving up is for escaped or invalid keys only: rare among what Go accepts.
        assert!(
            left * 100 < accepted,
            "{left} left to the decoder, {accepted} accepted"
        );
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
            let v = verdicts(doc.as_bytes());
            prop_assert!(v.is_ok(), "{}", v.unwrap_err());
        }
    }
}
