//! Go `encoding/json` output: HTML-safe string escaping and integers.
//!
//! Escaping follows `json.Marshal` (HTML escaping on): `<`, `>`, `&` as `\u003c`.., U+2028/U+2029
//! escaped, invalid UTF-8 as `\ufffd`, `\n` `\r` `\t` short forms, other control characters as
//! `\u00xx`. Go 1.22 also gave `\b` and `\f` short forms: [`GoJsonEscaping`] chooses which.

use super::fnv::{Frag, SpewFnv};
use super::json::utf8_len;

/// Which Go release's `encoding/json` wrote the JSON that was hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoJsonEscaping {
    /// Go < 1.22: backspace and form feed as `\u0008` / `\u000c`.
    Legacy,
    /// Go >= 1.22: backspace and form feed as `\b` / `\f`.
    Modern,
}

impl GoJsonEscaping {
    pub fn as_str(self) -> &'static str {
        match self {
            GoJsonEscaping::Legacy => "legacy",
            GoJsonEscaping::Modern => "modern",
        }
    }
}

impl std::str::FromStr for GoJsonEscaping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "legacy" => Ok(GoJsonEscaping::Legacy),
            "modern" => Ok(GoJsonEscaping::Modern),
            other => Err(format!(
                "unknown Go JSON escaping {other:?} (expected legacy or modern)"
            )),
        }
    }
}

/// Bytes that need escaping in an ASCII context.
static ESCAPE: [bool; 128] = {
    let mut t = [false; 128];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t
};

/// What [`Encoder::string_body`] must check of a byte before copying it as it is.
static NOT_PLAIN: [u8; 256] = {
    let mut t = [NON_ASCII; 256];
    let mut i = 0;
    while i < 128 {
        t[i] = if ESCAPE[i] { ESCAPED } else { 0 };
        i += 1;
    }
    t[0xe2] = NON_ASCII | MAY_SEPARATE;
    t
};
/// A byte in [`ESCAPE`].
const ESCAPED: u8 = 1;
/// Non-ASCII: copied as it is if the string is valid UTF-8.
const NON_ASCII: u8 = 2;
/// The first byte of U+2028 and U+2029, which Go escapes (and of other characters, which it
/// does not).
const MAY_SEPARATE: u8 = 4;

const HEX: &[u8; 16] = b"0123456789abcdef";
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn has_byte(w: u64, b: u8) -> u64 {
    let v = w ^ (ONES * u64::from(b));
    v.wrapping_sub(ONES) & !v & HIGHS
}

/// A `&'static Frag` for a byte string literal, its hash step computed at compile time.
macro_rules! frag {
    ($bytes:expr) => {{
        const F: $crate::hashing::fnv::Frag = $crate::hashing::fnv::Frag::new($bytes);
        &F
    }};
}
pub(crate) use frag;

/// Where an [`Encoder`] also puts the JSON it hashes: nowhere (`()`, [`Encoder::hashing`]) or
/// a buffer (`Vec<u8>`, [`Encoder::recording`], for `--explain`). A type parameter rather than
/// an `Option`, so that the hashing encoder carries no recording code (its `encode_container`
/// is half the size; BENCHMARKS.md).
pub trait Record {
    fn record(&mut self, bytes: &[u8]);
}

impl Record for () {
    #[inline(always)]
    fn record(&mut self, _: &[u8]) {}
}

impl Record for Vec<u8> {
    #[inline]
    fn record(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Go's `json.Marshal` output, fed straight into the kubelet's hash as it is produced (nothing
/// is buffered but a string's closing quote, which is hashed with the constant text after it),
/// and also kept as bytes when they are wanted (`--explain`).
pub(crate) struct Encoder<R: Record = ()> {
    fnv: SpewFnv,
    out: R,
    modern: bool,
    /// A string's closing quote not yet hashed: it goes with the next constant text, in one
    /// step ([`Frag`]'s quoted form), or alone before anything else.
    quote_pending: bool,
}

impl Encoder {
    /// Only the hash is wanted.
    pub fn hashing(escaping: GoJsonEscaping) -> Self {
        Encoder::new(escaping, ())
    }
}

impl Encoder<Vec<u8>> {
    /// The bytes are wanted too.
    pub fn recording(escaping: GoJsonEscaping, capacity: usize) -> Self {
        Encoder::new(escaping, Vec::with_capacity(capacity))
    }

    /// The bytes written.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.close_quote();
        self.out
    }
}

impl<R: Record> Encoder<R> {
    fn new(escaping: GoJsonEscaping, out: R) -> Self {
        Encoder {
            fnv: SpewFnv::default(),
            out,
            modern: escaping == GoJsonEscaping::Modern,
            quote_pending: false,
        }
    }

    /// The kubelet hash of everything written so far.
    pub fn hash(&self) -> u32 {
        let mut fnv = self.fnv;
        if self.quote_pending {
            fnv.frag(frag!(b""), true);
        }
        fnv.finish()
    }

    /// Hashes a pending closing quote on its own (before text that is not a [`Frag`]).
    #[inline]
    fn close_quote(&mut self) {
        if self.quote_pending {
            self.frag(frag!(b""));
        }
    }

    #[inline]
    pub fn raw(&mut self, b: &[u8]) {
        if b.is_empty() {
            return;
        }
        self.close_quote();
        self.fnv.write(b);
        self.out.record(b);
    }

    /// Constant text (keys, punctuation, escapes): one hash step whatever its length, a pending
    /// closing quote included.
    #[inline]
    pub(crate) fn frag(&mut self, f: &'static Frag) {
        self.fnv.frag(f, self.quote_pending);
        if self.quote_pending {
            self.out.record(b"\"");
        }
        self.out.record(f.bytes);
        self.quote_pending = false;
    }

    pub fn bool(&mut self, v: bool) {
        self.frag(if v { frag!(b"true") } else { frag!(b"false") });
    }

    pub fn int(&mut self, v: i64) {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        let mut u = v.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (u % 10) as u8;
            u /= 10;
            if u == 0 {
                break;
            }
        }
        if v < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        self.raw(&buf[i..]);
    }

    /// A JSON string exactly as Go's encoder writes it.
    pub fn string(&mut self, s: &[u8]) {
        self.string_after(frag!(b"\""), s);
    }

    /// Constant text ending in a string's opening quote (`,"key":"`), then the string: one hash
    /// step for the key and the quote. The closing quote is left pending, for the next
    /// [`Encoder::frag`] to take in its step (or [`Encoder::raw`], [`Encoder::hash`] or
    /// [`Encoder::into_bytes`] to add on its own).
    pub(crate) fn string_after(&mut self, prefix: &'static Frag, s: &[u8]) {
        debug_assert!(prefix.bytes.ends_with(b"\""));
        self.frag(prefix);
        self.string_body(s);
        self.quote_pending = true;
    }

    /// A string's escaped text without its quotes.
    ///
    /// The string is hashed as it is unless one of its bytes is one Go does not always copy
    /// ([`SpewFnv::write_unless_marked`]: short strings are checked beside the hash's serial
    /// chain, long ones 64 bytes at a time first). Non-ASCII text is copied as it is when it is
    /// valid UTF-8 and has no 0xe2 (the first byte of U+2028 and U+2029); anything else goes
    /// the careful way, [`Encoder::escaped_body`], with its UTF-8 validity checked once here.
    ///
    /// Private so that it only ever follows the opening quote's fragment (which took any pending
    /// quote): the one caller is [`Encoder::string_after`].
    #[inline]
    fn string_body(&mut self, s: &[u8]) {
        debug_assert!(!self.quote_pending);
        let seen = self.fnv.write_unless_marked(s, &NOT_PLAIN);
        if seen != 0 {
            let valid = seen & NON_ASCII == 0 || simdutf8::basic::from_utf8(s).is_ok();
            if seen & (ESCAPED | MAY_SEPARATE) != 0 || !valid {
                return self.escaped_body(s, valid);
            }
            self.fnv.write(s);
        }
        self.out.record(s);
    }

    /// [`Encoder::string_body`] for a string that needs escaping or holds 0xe2 or invalid
    /// UTF-8 (`valid`: it is valid UTF-8). Runs that need no escaping go from the input straight
    /// into the hash.
    #[inline(never)]
    fn escaped_body(&mut self, s: &[u8], valid: bool) {
        // In valid UTF-8 the only non-ASCII text Go changes is U+2028 and U+2029, which start
        // with 0xe2; other non-ASCII bytes are plain.
        let plain = |c: u8| match ESCAPE.get(usize::from(c)) {
            Some(&escaped) => !escaped,
            None => valid && c != 0xe2,
        };
        let mut start = 0;
        let mut i = 0;
        while let Some(&c) = s.get(i) {
            if plain(c) {
                // Skip the rest of the run eight bytes at a time.
                i += 1;
                while let Some(chunk) = s.get(i..i + 8) {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(chunk);
                    let w = u64::from_le_bytes(a);
                    let non_ascii = if valid { has_byte(w, 0xe2) } else { w & HIGHS };
                    let special = non_ascii
                        | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS)
                        | has_byte(w, b'"')
                        | has_byte(w, b'\\')
                        | has_byte(w, b'<')
                        | has_byte(w, b'>')
                        | has_byte(w, b'&');
                    if special != 0 {
                        // The lowest flagged byte is exact: jump straight to it.
                        i += (special.trailing_zeros() / 8) as usize;
                        break;
                    }
                    i += 8;
                }
                continue;
            }
            if c < 0x80 {
                self.raw(&s[start..i]);
                match c {
                    b'"' => self.frag(frag!(b"\\\"")),
                    b'\\' => self.frag(frag!(b"\\\\")),
                    b'\n' => self.frag(frag!(b"\\n")),
                    b'\r' => self.frag(frag!(b"\\r")),
                    b'\t' => self.frag(frag!(b"\\t")),
                    b'<' => self.frag(frag!(b"\\u003c")),
                    b'>' => self.frag(frag!(b"\\u003e")),
                    b'&' => self.frag(frag!(b"\\u0026")),
                    0x08 if self.modern => self.frag(frag!(b"\\b")),
                    0x0c if self.modern => self.frag(frag!(b"\\f")),
                    _ => self.raw(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[(c >> 4) as usize],
                        HEX[(c & 0xf) as usize],
                    ]),
                }
                i += 1;
                start = i;
                continue;
            }
            match utf8_len(&s[i..]) {
                None => {
                    self.raw(&s[start..i]);
                    self.frag(frag!(b"\\ufffd"));
                    i += 1;
                    start = i;
                }
                Some(3)
                    if c == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9) =>
                {
                    self.raw(&s[start..i]);
                    self.frag(if s[i + 2] == 0xa8 {
                        frag!(b"\\u2028")
                    } else {
                        frag!(b"\\u2029")
                    });
                    i += 3;
                    start = i;
                }
                Some(n) => i += n,
            }
        }
        self.raw(&s[start..]);
    }
}

/// Go-escaped JSON string of `s` (convenience for tests and small callers).
pub fn go_json_string(s: &[u8], escaping: GoJsonEscaping) -> Vec<u8> {
    let mut e = Encoder::recording(escaping, s.len() + 2);
    e.string(s);
    e.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let m = |s: &[u8]| {
            String::from_utf8_lossy(&go_json_string(s, GoJsonEscaping::Modern)).into_owned()
        };
        let l = |s: &[u8]| {
            String::from_utf8_lossy(&go_json_string(s, GoJsonEscaping::Legacy)).into_owned()
        };
        assert_eq!(m(b"<a&b>"), r#""\u003ca\u0026b\u003e""#);
        assert_eq!(
            m(b"\x08\x0c\n\r\t\x01\x1f\x7f"),
            "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\""
        );
        assert_eq!(l(b"\x08\x0c"), r#""\u0008\u000c""#);
        assert_eq!(m("x\u{2028}y\u{2029}".as_bytes()), r#""x\u2028y\u2029""#);
        assert_eq!(m(b"a\xffb"), r#""a\ufffdb""#);
        assert_eq!(m("é😀/\"\\".as_bytes()), "\"é😀/\\\"\\\\\"");
        assert_eq!(m(b"abcdefghijklmnopq<"), r#""abcdefghijklmnopq\u003c""#);
        // Long strings (the hash's vector path): non-ASCII copied as it is, U+2028 escaped,
        // invalid UTF-8 replaced.
        let quoted = |s: &str| format!("\"{s}\"");
        assert_eq!(
            m("a\u{2014}".repeat(40).as_bytes()),
            quoted(&"a\u{2014}".repeat(40))
        );
        assert_eq!(
            m("\u{e9}\u{1f600}".repeat(20).as_bytes()),
            quoted(&"\u{e9}\u{1f600}".repeat(20))
        );
        assert_eq!(
            m("b\u{2028}".repeat(30).as_bytes()),
            quoted(&r"b\u2028".repeat(30))
        );
        let mut invalid = b"abc".repeat(30);
        invalid[70] = 0xc3;
        let want = format!(
            "{}\\ufffd{}",
            "abc".repeat(24).get(..70).unwrap_or_default(),
            &"abc".repeat(30)[71..]
        );
        assert_eq!(m(&invalid), quoted(&want));
        // The escaping path over valid UTF-8: non-ASCII runs (a whole eight-byte word of them
        // too) beside escapes, a 0xe2 character that is not a separator, and invalid bytes
        // among valid characters.
        assert_eq!(m("<\u{2014}".as_bytes()), "\"\\u003c\u{2014}\"");
        assert_eq!(
            m(("\u{e9}".repeat(8) + "<").as_bytes()),
            quoted(&("\u{e9}".repeat(8) + r"\u003c"))
        );
        assert_eq!(
            m("a\u{2014}<b\u{2028}".as_bytes()),
            quoted("a\u{2014}\\u003cb\\u2028")
        );
        assert_eq!(m(b"\xc3\xa9\xff<"), quoted("\u{e9}\\ufffd\\u003c"));
    }

    /// A string's closing quote, held back for the constant text after it, is hashed and
    /// written whatever comes next: a fragment, a number, or the end.
    #[test]
    fn pending_closing_quote_before_anything() {
        #[derive(Clone, Copy)]
        enum Then {
            Nothing,
            Number,
            Fragment,
        }
        fn write<R: Record>(e: &mut Encoder<R>, then: Then) {
            e.frag(frag!(b"["));
            e.string(b"a");
            match then {
                Then::Nothing => {}
                Then::Number => e.int(-42),
                Then::Fragment => e.frag(frag!(b",\"n\":")),
            }
        }
        for (then, want) in [
            (Then::Nothing, &br#"["a""#[..]),
            (Then::Number, br#"["a"-42"#),
            (Then::Fragment, br#"["a","n":"#),
        ] {
            let mut hashing = Encoder::hashing(GoJsonEscaping::Modern);
            let mut recording = Encoder::recording(GoJsonEscaping::Modern, 16);
            write(&mut hashing, then);
            write(&mut recording, then);
            let want_hash = crate::hashing::spew_fnv32a(want);
            assert_eq!(hashing.hash(), want_hash);
            assert_eq!(recording.hash(), want_hash);
            assert_eq!(recording.into_bytes(), want);
        }
    }

    /// The hash of a string, whether it is copied as it is or goes the escaping path, short or
    /// long, is the hash of the bytes the encoder writes.
    #[test]
    fn hash_equals_hash_of_written_bytes() {
        let long = |piece: &str| piece.repeat(80 / piece.len() + 1).into_bytes();
        let mut strings: Vec<Vec<u8>> = [
            &b""[..],
            b"a",
            b"plain-text:v1.2",
            b"<",
            b"abc\"def",
            b"tab\there",
            "caf\u{e9}".as_bytes(),
            b"bad\xff utf-8",
            b"0123456789abcdef&0123456789",
            // Non-ASCII that is copied as it is, and U+2028 / U+2029 (which start like it).
            "em\u{2014}dash \u{20ac}".as_bytes(),
            "line\u{2028}sep".as_bytes(),
            "\u{2029}".as_bytes(),
            b"\xe2\x80",
        ]
        .iter()
        .map(|s| s.to_vec())
        .collect();
        // Long enough for the hash's vector path.
        for piece in [
            "z",
            "\u{e9}\u{1f600}",
            "a\u{2014}",
            "b\u{2028}",
            "<\u{e9}>",
            "\u{7f}",
        ] {
            strings.push(long(piece));
        }
        let mut invalid = long("abc");
        invalid[70] = 0xc3;
        strings.push(invalid);
        for escaping in [GoJsonEscaping::Modern, GoJsonEscaping::Legacy] {
            for s in &strings {
                let mut e = Encoder::hashing(escaping);
                e.frag(frag!(b"{"));
                e.string(s);
                e.string(s);
                let mut written = b"{".to_vec();
                written.extend(go_json_string(s, escaping));
                written.extend(go_json_string(s, escaping));
                assert_eq!(
                    e.hash(),
                    crate::hashing::spew_fnv32a(&written),
                    "{:?}",
                    String::from_utf8_lossy(s)
                );
            }
        }
    }
}
