//! A Go-faithful JSON reader over bytes (the part of `encoding/json` the kubelet hash depends on).
//!
//! Decisions:
//! - One pass does both what Go's `checkValid` and its decoder do. Every byte is still
//!   syntax-checked (unknown fields are skipped *with* validation), so the accept/reject outcome
//!   equals Go's: any syntax error or type error rejects the whole document. When a type error is
//!   found first, the caller re-validates the rest so that, as in Go, a syntax error anywhere
//!   takes precedence in the message.
//! - Nesting is limited to 10000 levels like Go's scanner (`maxNestingDepth`); skipping uses an
//!   explicit stack, and schema decoding recurses only as deep as the v1.Container schema, so no
//!   input can overflow the native stack.
//! - Strings decode like Go's `unquote`: escapes, surrogate pairs, lone surrogates and each byte
//!   of invalid UTF-8 become U+FFFD. Strings without escapes or invalid UTF-8 are borrowed.
//! - Whitespace is exactly Go's: space, tab, CR, LF.

use std::borrow::Cow;
use std::fmt;

use crate::quantity::QuantityError;

/// Go's `maxNestingDepth`.
pub const MAX_DEPTH: u32 = 10_000;

/// One step of a JSON path, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathSeg {
    Field(&'static str),
    Index(usize),
    Key(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeErrorKind {
    /// Not JSON at all (Go's `SyntaxError`).
    Syntax(String),
    /// Valid JSON of the wrong type for the field (Go's `UnmarshalTypeError`).
    Type {
        found: String,
        expected: &'static str,
    },
    /// A resource quantity apimachinery refuses.
    Quantity { text: String, error: QuantityError },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub kind: DecodeErrorKind,
    /// Byte offset in the input where the problem was found.
    pub offset: usize,
    /// Outermost first once fully unwound.
    pub path: Vec<PathSeg>,
}

impl DecodeError {
    pub(crate) fn is_syntax(&self) -> bool {
        matches!(self.kind, DecodeErrorKind::Syntax(_))
    }

    /// Prepends a path step while the error unwinds through the schema.
    #[cold]
    #[inline(never)]
    pub fn at(mut self: Box<Self>, seg: PathSeg) -> Box<Self> {
        self.path.push(seg);
        self
    }

    /// `ports[0].containerPort` style path (empty for the top level).
    pub(crate) fn path_string(&self) -> String {
        let mut s = String::new();
        for seg in self.path.iter().rev() {
            match seg {
                PathSeg::Field(f) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(f);
                }
                PathSeg::Index(i) => {
                    s.push('[');
                    s.push_str(&i.to_string());
                    s.push(']');
                }
                PathSeg::Key(k) => {
                    s.push('[');
                    s.push_str(&format!("{:?}", excerpt(k.as_bytes())));
                    s.push(']');
                }
            }
        }
        s
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path_string();
        let at = if path.is_empty() {
            String::from("the container")
        } else {
            path
        };
        match &self.kind {
            DecodeErrorKind::Syntax(m) => write!(f, "invalid JSON at byte {}: {m}", self.offset),
            DecodeErrorKind::Type { found, expected } => {
                write!(
                    f,
                    "cannot use {found} as {expected} at {at} (byte {})",
                    self.offset
                )
            }
            DecodeErrorKind::Quantity { text, error } => {
                write!(f, "invalid quantity {text:?} at {at}: {error}")
            }
        }
    }
}

/// Boxed so that a `DResult` is small enough to be returned in registers on the hot path.
pub(crate) type DResult<T> = Result<T, Box<DecodeError>>;

const ONES: u64 = 0x0101_0101_0101_0101;
pub(crate) const HIGHS: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn has_zero_byte(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGHS
}

/// The quote mask and the mask of every byte that ends a plain run of string text (quote,
/// backslash, control byte) in eight bytes of input. The lowest flagged byte of either is exact
/// (borrows only propagate upwards), so when it is in the quote mask it is the closing quote.
#[inline(always)]
pub(crate) fn string_marks(w: u64) -> (u64, u64) {
    let quote = has_zero_byte(w ^ (ONES * u64::from(b'"')));
    let special = quote
        | has_zero_byte(w ^ (ONES * u64::from(b'\\')))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
    (quote, special)
}

/// SSE2 (part of every x86-64 CPU, so no feature check).
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// [`super::string_marks`] of 16 bytes as bit masks (bit `i` for byte `i`): quotes; quotes,
    /// backslashes and control bytes; non-ASCII bytes.
    #[inline(always)]
    pub(crate) fn string_marks_16(bytes: &[u8]) -> (u32, u32, u32) {
        assert!(bytes.len() >= 16);
        // SAFETY: SSE2 is in the x86-64 baseline; the load reads 16 bytes of `bytes` (checked
        // just above), unaligned.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast());
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            // Below 0x20 (unsigned): the byte's maximum with 0x1f is 0x1f.
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1f)), _mm_set1_epi8(0x1f));
            let special = _mm_or_si128(_mm_or_si128(quote, backslash), control);
            (
                _mm_movemask_epi8(quote) as u32,
                _mm_movemask_epi8(special) as u32,
                _mm_movemask_epi8(v) as u32,
            )
        }
    }
}

pub struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    depth: u32,
}

/// What a string scan found.
struct StrScan {
    start: usize,
    end: usize,
    escaped: bool,
    non_ascii: bool,
}

impl<'a> Parser<'a> {
    pub fn new(src: &'a [u8]) -> Self {
        Parser {
            src,
            pos: 0,
            depth: 0,
        }
    }

    pub fn offset(&self) -> usize {
        self.pos
    }

    // The error builders here are cold and out of line: inlined, their allocation and
    // formatting made the hot callers larger and saved more registers.
    #[cold]
    #[inline(never)]
    fn syntax<T>(&self, msg: impl Into<String>) -> DResult<T> {
        Err(Box::new(DecodeError {
            kind: DecodeErrorKind::Syntax(msg.into()),
            offset: self.pos,
            path: Vec::new(),
        }))
    }

    #[cold]
    #[inline(never)]
    fn unexpected<T>(&self, context: &str) -> DResult<T> {
        match self.src.get(self.pos) {
            None => self.syntax("unexpected end of JSON input"),
            Some(&c) => self.syntax(format!("invalid character {} {context}", describe_byte(c))),
        }
    }

    /// A type mismatch at the value starting here. The value is *not* consumed.
    #[cold]
    #[inline(never)]
    pub(crate) fn type_error<T>(&self, expected: &'static str) -> DResult<T> {
        let found = match self.src.get(self.pos) {
            Some(b'{') => "an object",
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b't') | Some(b'f') => "a boolean",
            Some(b'n') => "null",
            _ => "a number",
        };
        Err(Box::new(DecodeError {
            kind: DecodeErrorKind::Type {
                found: found.to_owned(),
                expected,
            },
            offset: self.pos,
            path: Vec::new(),
        }))
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn number_type_error<T>(
        &self,
        literal: &[u8],
        expected: &'static str,
        offset: usize,
    ) -> DResult<T> {
        Err(Box::new(DecodeError {
            kind: DecodeErrorKind::Type {
                found: format!("number {}", excerpt(literal)),
                expected,
            },
            offset,
            path: Vec::new(),
        }))
    }

    #[inline(always)]
    pub(crate) fn ws(&mut self) {
        // A local position: the compiler cannot keep `self.pos` in a register across the loads.
        let mut p = self.pos;
        while let Some(&c) = self.src.get(p) {
            if c == b' ' || c == b'\n' || c == b'\r' || c == b'\t' {
                p += 1;
            } else {
                break;
            }
        }
        self.pos = p;
    }

    /// Skips whitespace and returns the first byte of the next value (not consumed).
    #[inline(always)]
    pub(crate) fn peek_value(&mut self) -> DResult<u8> {
        self.ws();
        match self.src.get(self.pos) {
            Some(&c) => Ok(c),
            None => self.syntax("unexpected end of JSON input"),
        }
    }

    /// After the top-level value: only whitespace may follow.
    pub fn finish(&mut self) -> DResult<()> {
        self.ws();
        if self.pos < self.src.len() {
            return self.unexpected("after top-level value");
        }
        Ok(())
    }

    fn enter(&mut self) -> DResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.syntax("exceeded max depth");
        }
        Ok(())
    }

    /// Consumes `{`; then call [`Parser::next_key`] until it returns `None`.
    pub(crate) fn begin_object(&mut self) -> DResult<()> {
        self.pos += 1;
        self.enter()
    }

    /// The next key of an object (decoded), positioned at its value; `None` at `}`.
    #[inline(always)]
    pub(crate) fn next_key(&mut self, first: &mut bool) -> DResult<Option<Cow<'a, [u8]>>> {
        let key = self.next_key_changed(first)?;
        Ok(key.map(|(raw, changed)| decoded_cow(raw, changed)))
    }

    /// [`Parser::next_key`] handing the decoded key to `f` (no `Cow` is built for the usual
    /// plain key): struct decoding looks the key up and keeps only the field.
    #[inline(always)]
    pub(crate) fn next_key_with<T>(
        &mut self,
        first: &mut bool,
        f: impl FnOnce(&[u8]) -> T,
    ) -> DResult<Option<T>> {
        if !self.key_start(first)? {
            return Ok(None);
        }
        let sc = self.scan_string()?;
        let t = if sc.escaped || sc.non_ascii {
            f(&self.decoded(&sc))
        } else {
            f(&self.src[sc.start..sc.end])
        };
        self.colon()?;
        Ok(Some(t))
    }

    /// Moves past `,` to the opening quote of the next key; false (and consumed) at `}`.
    #[inline(always)]
    fn key_start(&mut self, first: &mut bool) -> DResult<bool> {
        self.ws();
        let c = self.src.get(self.pos).copied();
        if c == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if *first {
            *first = false;
        } else if c == Some(b',') {
            self.pos += 1;
            self.ws();
        } else {
            return self.unexpected("after object key:value pair");
        }
        if self.src.get(self.pos) != Some(&b'"') {
            return self.unexpected("looking for beginning of object key string");
        }
        Ok(true)
    }

    #[inline(always)]
    fn colon(&mut self) -> DResult<()> {
        self.ws();
        if self.src.get(self.pos) != Some(&b':') {
            return self.unexpected("after object key");
        }
        self.pos += 1;
        Ok(())
    }

    /// Consumes `[`; then call [`Parser::next_elem`] until it returns false.
    pub(crate) fn begin_array(&mut self) -> DResult<()> {
        self.pos += 1;
        self.enter()
    }

    #[inline(always)]
    pub(crate) fn next_elem(&mut self, first: &mut bool) -> DResult<bool> {
        self.ws();
        let c = self.src.get(self.pos).copied();
        if *first {
            *first = false;
            if c == Some(b']') {
                self.pos += 1;
                self.depth -= 1;
                return Ok(false);
            }
            return Ok(true);
        }
        match c {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(b']') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            _ => self.unexpected("after array element"),
        }
    }

    /// Consumes one of `true`, `false`, `null` (first byte already peeked).
    pub fn literal(&mut self) -> DResult<&'a [u8]> {
        // Each word compared as a constant (a compare of a length known only at run time is a
        // library call).
        let rest = self.src.get(self.pos..).unwrap_or_default();
        let len = match rest.first() {
            Some(b't') if rest.starts_with(b"true") => 4,
            Some(b'f') if rest.starts_with(b"false") => 5,
            Some(b'n') if rest.starts_with(b"null") => 4,
            _ => return self.literal_error(),
        };
        self.pos += len;
        Ok(&rest[..len])
    }

    /// A misspelt literal: the error is at the first byte that differs, where Go's scanner
    /// stops.
    #[cold]
    #[inline(never)]
    fn literal_error<T>(&mut self) -> DResult<T> {
        let word: &[u8] = match self.src.get(self.pos) {
            Some(b't') => b"true",
            Some(b'f') => b"false",
            _ => b"null",
        };
        for (i, &w) in word.iter().enumerate() {
            if self.src.get(self.pos + i) != Some(&w) {
                self.pos += i;
                return self.unexpected("in literal");
            }
        }
        self.syntax("invalid literal")
    }

    /// Consumes a number and returns its literal text (JSON grammar checked). Inline: its
    /// callers' numbers are short.
    #[inline(always)]
    pub fn number(&mut self) -> DResult<&'a [u8]> {
        let s = self.src;
        let start = self.pos;
        let mut p = self.pos;
        if s.get(p) == Some(&b'-') {
            p += 1;
        }
        match s.get(p) {
            Some(b'0') => p += 1,
            Some(c) if c.is_ascii_digit() => {
                while s.get(p).is_some_and(u8::is_ascii_digit) {
                    p += 1;
                }
            }
            _ => {
                self.pos = p;
                return self.unexpected("in numeric literal");
            }
        }
        if s.get(p) == Some(&b'.') {
            p += 1;
            if !s.get(p).is_some_and(u8::is_ascii_digit) {
                self.pos = p;
                return self.unexpected("after decimal point in numeric literal");
            }
            while s.get(p).is_some_and(u8::is_ascii_digit) {
                p += 1;
            }
        }
        if matches!(s.get(p), Some(b'e') | Some(b'E')) {
            p += 1;
            if matches!(s.get(p), Some(b'+') | Some(b'-')) {
                p += 1;
            }
            if !s.get(p).is_some_and(u8::is_ascii_digit) {
                self.pos = p;
                return self.unexpected("in exponent of numeric literal");
            }
            while s.get(p).is_some_and(u8::is_ascii_digit) {
                p += 1;
            }
        }
        self.pos = p;
        Ok(&s[start..p])
    }

    /// A JSON integer for a Go int of the given range; `None` for null.
    pub fn int(&mut self, min: i64, max: i64, ty: &'static str) -> DResult<Option<i64>> {
        match self.peek_value()? {
            b'0'..=b'9' => {
                if let Some((v, len)) = self.short_uint()
                    && v >= min
                    && v <= max
                {
                    self.pos += len;
                    return Ok(Some(v));
                }
                self.int_literal(min, max, ty)
            }
            b'-' => self.int_literal(min, max, ty),
            b'n' => {
                self.literal()?;
                Ok(None)
            }
            _ => self.type_error(ty),
        }
    }

    /// The usual integer (up to seven digits, no sign, and the byte after them ends the
    /// number) and its length, read as one word without a loop: no branch on how many digits
    /// there are, which varies from number to number. It needs eight bytes of input from the
    /// number's start; `None` (fewer, or another number) leaves it to the full reading.
    #[inline(always)]
    fn short_uint(&self) -> Option<(i64, usize)> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.src.get(self.pos..self.pos + 8)?);
        let digits = u64::from_le_bytes(w) ^ (ONES * u64::from(b'0'));
        // Every non-digit byte is flagged (digits are now 0..=9). Flags above the lowest may be
        // wrong (a carry from a byte of 0x8a or more), but only the lowest is used, and no carry
        // reaches it: the bytes below it are digits.
        let flags = (digits.wrapping_add(ONES * (0x80 - 10)) | digits) & HIGHS;
        let len = (flags.trailing_zeros() / 8) as usize;
        let after = *w.get(len)?;
        if len == 0 || after == b'.' || after | 0x20 == b'e' || (w[0] == b'0' && len > 1) {
            // A fraction, an exponent or a leading zero: Go's own errors, from the full reading.
            return None;
        }
        // The digits moved to the top bytes (zeros below them are leading zeros), then summed
        // pairwise: 8 digits to 4 pairs, to 2 quadruples, to one number.
        let v = digits << (8 * (8 - len));
        let v = (v.wrapping_mul(10 * 256 + 1) >> 8) & 0x00ff_00ff_00ff_00ff;
        let v = (v.wrapping_mul(100 * 65536 + 1) >> 16) & 0x0000_ffff_0000_ffff;
        let v = v.wrapping_mul((10000 << 32) + 1) >> 32;
        Some((v as i64, len))
    }

    /// [`Parser::int`] of a number (at its `-` or first digit), read in full. It reads any
    /// value as `int` would; its `null` and type-error arms are not reached from `int`, but
    /// without them `int` compiled differently, and no faster.
    fn int_literal(&mut self, min: i64, max: i64, ty: &'static str) -> DResult<Option<i64>> {
        match self.peek_value()? {
            b'-' | b'0'..=b'9' => {
                let at = self.pos;
                let lit = self.number()?;
                match parse_int(lit) {
                    Some(v) if v >= min && v <= max => Ok(Some(v)),
                    _ => self.number_type_error(lit, ty, at),
                }
            }
            b'n' => {
                self.literal()?;
                Ok(None)
            }
            _ => self.type_error(ty),
        }
    }

    /// Scans a string starting at its opening quote; validates escapes.
    #[inline(always)]
    fn scan_string(&mut self) -> DResult<StrScan> {
        let s = self.src;
        let start = self.pos + 1;
        let mut p = start;
        let mut high: u64 = 0;
        // Fast path, for strings without escapes: the first 16 bytes at once, where the usual
        // key or short value ends; then eight bytes at a time until the first quote, backslash
        // or control byte.
        #[cfg(target_arch = "x86_64")]
        if let Some(head) = s.get(start..start + 16) {
            let (quote, special, non_ascii) = sse2::string_marks_16(head);
            if special == 0 {
                p += 16;
                high = if non_ascii == 0 { 0 } else { HIGHS };
            } else if quote & special & special.wrapping_neg() != 0 {
                let len = special.trailing_zeros() as usize;
                self.pos = start + len + 1;
                return Ok(StrScan {
                    start,
                    end: start + len,
                    escaped: false,
                    non_ascii: non_ascii & ((1 << len) - 1) != 0,
                });
            }
        }
        while let Some(chunk) = s.get(p..p + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            let w = u64::from_le_bytes(w);
            let (quote, special) = string_marks(w);
            if special != 0 {
                let first = special & special.wrapping_neg();
                if first & quote == 0 {
                    break;
                }
                let end = p + (first.trailing_zeros() / 8) as usize;
                self.pos = end + 1;
                return Ok(StrScan {
                    start,
                    end,
                    escaped: false,
                    non_ascii: (high | (w & (first - 1))) & HIGHS != 0,
                });
            }
            high |= w;
            p += 8;
        }
        self.scan_string_rest(start, p, high)
    }

    /// The rest of [`Parser::scan_string`] from `p` (escapes, errors, the last bytes).
    #[inline(never)]
    fn scan_string_rest(&mut self, start: usize, mut p: usize, mut high: u64) -> DResult<StrScan> {
        let s = self.src;
        let mut escaped = false;
        loop {
            // Eight bytes at a time; the lowest flagged byte of the masks is exactly the first
            // quote, backslash or control byte (borrows only propagate upwards).
            while let Some(chunk) = s.get(p..p + 8) {
                let mut w = [0u8; 8];
                w.copy_from_slice(chunk);
                let w = u64::from_le_bytes(w);
                let special = string_marks(w).1;
                if special != 0 {
                    let skip = (special.trailing_zeros() / 8) as usize;
                    high |= w & ((1u64 << (skip * 8)) - 1);
                    p += skip;
                    break;
                }
                high |= w;
                p += 8;
            }
            let Some(&c) = s.get(p) else {
                self.pos = p;
                return self.syntax("unexpected end of JSON input");
            };
            if c == b'"' {
                self.pos = p + 1;
                return Ok(StrScan {
                    start,
                    end: p,
                    escaped,
                    non_ascii: high & HIGHS != 0,
                });
            } else if c == b'\\' {
                escaped = true;
                match s.get(p + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => p += 2,
                    Some(b'u') => {
                        for i in 0..4 {
                            if !s.get(p + 2 + i).is_some_and(u8::is_ascii_hexdigit) {
                                self.pos = p + 2 + i;
                                return self.unexpected("in \\u hexadecimal character escape");
                            }
                        }
                        p += 6;
                    }
                    _ => {
                        self.pos = p + 1;
                        return self.unexpected("in string escape code");
                    }
                }
            } else if c < 0x20 {
                self.pos = p;
                return self.unexpected("in string literal");
            } else {
                // Fewer than eight bytes left in the input.
                if c >= 0x80 {
                    high |= HIGHS;
                }
                p += 1;
            }
        }
    }

    /// Consumes a string and returns its raw bytes between the quotes (escapes not processed).
    #[inline(always)]
    pub(crate) fn string_raw(&mut self) -> DResult<&'a [u8]> {
        let sc = self.scan_string()?;
        Ok(&self.src[sc.start..sc.end])
    }

    /// Consumes a string and returns its decoded bytes (always valid UTF-8).
    #[inline(always)]
    pub fn string(&mut self) -> DResult<Cow<'a, [u8]>> {
        let (raw, changed) = self.string_changed()?;
        Ok(decoded_cow(raw, changed))
    }

    /// [`Parser::next_key`] as [`Parser::string_changed`] gives it.
    pub(crate) fn next_key_changed(
        &mut self,
        first: &mut bool,
    ) -> DResult<Option<(&'a [u8], bool)>> {
        if !self.key_start(first)? {
            return Ok(None);
        }
        let key = self.string_changed()?;
        self.colon()?;
        Ok(Some(key))
    }

    /// Consumes a string: its raw text, and whether Go's decoding changes it (escapes or
    /// invalid UTF-8), when [`unquote_into`] gives the decoded bytes.
    #[inline(always)]
    pub(crate) fn string_changed(&mut self) -> DResult<(&'a [u8], bool)> {
        let sc = self.scan_string()?;
        let raw = &self.src[sc.start..sc.end];
        Ok((raw, decoding_changes(raw, sc.escaped, sc.non_ascii)))
    }

    /// A scanned string's decoded bytes: borrowed unless Go's decoding changes them.
    #[inline(always)]
    fn decoded(&self, sc: &StrScan) -> Cow<'a, [u8]> {
        let raw = &self.src[sc.start..sc.end];
        decoded_cow(raw, decoding_changes(raw, sc.escaped, sc.non_ascii))
    }

    /// Skips one value of any type, validating it (iteratively, depth-limited).
    pub(crate) fn skip_value(&mut self) -> DResult<()> {
        let mut stack = Opened::default();
        loop {
            let c = self.peek_value()?;
            match c {
                b'{' => {
                    self.pos += 1;
                    self.enter()?;
                    self.ws();
                    if self.src.get(self.pos) == Some(&b'}') {
                        self.pos += 1;
                        self.depth -= 1;
                    } else {
                        stack.push(b'{');
                        self.object_key_colon()?;
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    self.enter()?;
                    self.ws();
                    if self.src.get(self.pos) == Some(&b']') {
                        self.pos += 1;
                        self.depth -= 1;
                    } else {
                        stack.push(b'[');
                        continue;
                    }
                }
                b'"' => {
                    self.scan_string()?;
                }
                b't' | b'f' | b'n' => {
                    self.literal()?;
                }
                b'-' | b'0'..=b'9' => {
                    self.number()?;
                }
                _ => return self.unexpected("looking for beginning of value"),
            }
            // A value is complete: close containers or move to the next element.
            loop {
                let Some(top) = stack.last() else {
                    return Ok(());
                };
                self.ws();
                match self.src.get(self.pos).copied() {
                    Some(b',') => {
                        self.pos += 1;
                        if top == b'{' {
                            self.ws();
                            self.object_key_colon()?;
                        }
                        break;
                    }
                    Some(b'}') if top == b'{' => {
                        self.pos += 1;
                        self.depth -= 1;
                        stack.pop();
                    }
                    Some(b']') if top == b'[' => {
                        self.pos += 1;
                        self.depth -= 1;
                        stack.pop();
                    }
                    _ if top == b'{' => return self.unexpected("after object key:value pair"),
                    _ => return self.unexpected("after array element"),
                }
            }
        }
    }

    fn object_key_colon(&mut self) -> DResult<()> {
        if self.src.get(self.pos) != Some(&b'"') {
            return self.unexpected("looking for beginning of object key string");
        }
        self.scan_string()?;
        self.ws();
        if self.src.get(self.pos) != Some(&b':') {
            return self.unexpected("after object key");
        }
        self.pos += 1;
        Ok(())
    }
}

/// The containers [`Parser::skip_value`] is inside, innermost last: one bit each (object or
/// array), the innermost 64 in a register, so that skipping a nested value allocates nothing
/// unless it is nested more than 64 deep.
#[derive(Default)]
struct Opened {
    /// The innermost `len % 64` (64 when that is 0 and `len > 0`) containers, innermost lowest.
    bits: u64,
    len: usize,
    /// Full words of outer containers.
    outer: Vec<u64>,
}

impl Opened {
    /// `c`: `{` or `[`.
    fn push(&mut self, c: u8) {
        if self.len > 0 && self.len.is_multiple_of(64) {
            self.outer.push(self.bits);
            self.bits = 0;
        }
        self.bits = (self.bits << 1) | u64::from(c == b'{');
        self.len += 1;
    }

    fn pop(&mut self) {
        debug_assert!(self.len > 0, "a pop without a push");
        self.len = self.len.saturating_sub(1);
        self.bits >>= 1;
        if self.len > 0 && self.len.is_multiple_of(64) {
            self.bits = self.outer.pop().unwrap_or_default();
        }
    }

    /// The innermost container's opening byte.
    fn last(&self) -> Option<u8> {
        (self.len > 0).then_some(if self.bits & 1 != 0 { b'{' } else { b'[' })
    }
}

/// Validates a whole document like Go's `checkValid` (used to prefer syntax errors in messages).
pub(crate) fn validate(src: &[u8]) -> DResult<()> {
    let mut p = Parser::new(src);
    p.skip_value()?;
    p.finish()
}

/// Input text quoted in an error: whole when short, else its first 64 characters and its
/// length, so that a 10 MB value makes a readable one-line reason.
pub(crate) fn excerpt(text: &[u8]) -> String {
    const SHOWN: usize = 64;
    let text = String::from_utf8_lossy(text);
    if text.chars().count() <= SHOWN {
        return text.into_owned();
    }
    let shown: String = text.chars().take(SHOWN).collect();
    format!("{shown}… ({} bytes)", text.len())
}

/// A quantity apimachinery refuses, found at `offset`.
#[cold]
#[inline(never)]
pub(crate) fn quantity_error<T>(text: &[u8], error: QuantityError, offset: usize) -> DResult<T> {
    Err(Box::new(DecodeError {
        kind: DecodeErrorKind::Quantity {
            text: excerpt(text),
            error,
        },
        offset,
        path: Vec::new(),
    }))
}

fn describe_byte(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        0x20..=0x7e => format!("'{}'", c as char),
        _ => format!("byte 0x{c:02x}"),
    }
}

/// Length of the valid UTF-8 sequence at the start of `s` (Go's DecodeRune acceptance).
#[inline]
pub(crate) fn utf8_len(s: &[u8]) -> Option<usize> {
    let b0 = *s.first()?;
    let cont = |i: usize, lo: u8, hi: u8| s.get(i).is_some_and(|&b| (lo..=hi).contains(&b));
    match b0 {
        0x00..=0x7f => Some(1),
        0xc2..=0xdf => cont(1, 0x80, 0xbf).then_some(2),
        0xe0 => (cont(1, 0xa0, 0xbf) && cont(2, 0x80, 0xbf)).then_some(3),
        0xe1..=0xec | 0xee..=0xef => (cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf)).then_some(3),
        0xed => (cont(1, 0x80, 0x9f) && cont(2, 0x80, 0xbf)).then_some(3),
        0xf0 => (cont(1, 0x90, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf)).then_some(4),
        0xf1..=0xf3 => {
            (cont(1, 0x80, 0xbf) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf)).then_some(4)
        }
        0xf4 => (cont(1, 0x80, 0x8f) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf)).then_some(4),
        _ => None,
    }
}

fn hex4(s: &[u8]) -> Option<u32> {
    let s = s.get(..4)?;
    let mut v = 0u32;
    for &c in s {
        let d = (c as char).to_digit(16)?;
        v = v * 16 + d;
    }
    Some(v)
}

/// Whether Go's decoding changes a string's raw text (`escaped`: it has a backslash;
/// `non_ascii`: a byte above 0x7f, which may be invalid UTF-8 that Go replaces).
#[inline(always)]
pub(crate) fn decoding_changes(raw: &[u8], escaped: bool, non_ascii: bool) -> bool {
    escaped || (non_ascii && simdutf8::basic::from_utf8(raw).is_err())
}

/// A string's decoded bytes from its raw text: borrowed unless Go's decoding `changed` them.
fn decoded_cow(raw: &[u8], changed: bool) -> Cow<'_, [u8]> {
    if changed {
        Cow::Owned(unquote(raw))
    } else {
        Cow::Borrowed(raw)
    }
}

fn push_char(out: &mut impl for<'x> Extend<&'x u8>, c: u32) {
    let ch = char::from_u32(c).unwrap_or('\u{fffd}');
    let mut buf = [0u8; 4];
    out.extend(ch.encode_utf8(&mut buf).as_bytes());
}

/// Go's `unquoteBytes` on the raw content of an already-validated string.
pub(crate) fn unquote(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    unquote_into(raw, &mut out);
    out
}

/// [`unquote`] into a buffer of the caller's.
pub(crate) fn unquote_into(raw: &[u8], out: &mut impl for<'x> Extend<&'x u8>) {
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c == b'\\' {
            let e = raw.get(i + 1).copied().unwrap_or(b'\\');
            i += 2;
            match e {
                b'b' => out.extend(&[0x08]),
                b'f' => out.extend(&[0x0c]),
                b'n' => out.extend(b"\n"),
                b'r' => out.extend(b"\r"),
                b't' => out.extend(b"\t"),
                b'u' => {
                    let mut r = hex4(&raw[i..]).unwrap_or(0xfffd);
                    i += 4;
                    if (0xd800..0xe000).contains(&r) {
                        // A surrogate: valid only as a high+low pair, else U+FFFD.
                        let next = if raw.get(i) == Some(&b'\\') && raw.get(i + 1) == Some(&b'u') {
                            hex4(&raw[i + 2..])
                        } else {
                            None
                        };
                        match next {
                            Some(lo)
                                if (0xd800..0xdc00).contains(&r)
                                    && (0xdc00..0xe000).contains(&lo) =>
                            {
                                r = 0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00);
                                i += 6;
                            }
                            _ => r = 0xfffd,
                        }
                    }
                    push_char(out, r);
                }
                other => out.extend(&[other]),
            }
        } else if c < 0x80 {
            out.extend(&[c]);
            i += 1;
        } else {
            match utf8_len(&raw[i..]) {
                Some(n) => {
                    out.extend(&raw[i..i + n]);
                    i += n;
                }
                None => {
                    out.extend("\u{fffd}".as_bytes());
                    i += 1;
                }
            }
        }
    }
}

/// Go's `strconv.ParseInt(lit, 10, 64)` on a JSON number literal.
pub(crate) fn parse_int(lit: &[u8]) -> Option<i64> {
    let (neg, digits) = match lit.first() {
        Some(b'-') => (true, &lit[1..]),
        _ => (false, lit),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unquote_like_go() {
        assert_eq!(unquote(br"\ud83d\ude00"), "😀".as_bytes());
        assert_eq!(unquote(br"\ud800\ud800"), "\u{fffd}\u{fffd}".as_bytes());
        assert_eq!(unquote(br"\udc00x"), "\u{fffd}x".as_bytes());
        assert_eq!(unquote(br"\ud800\u0041"), "\u{fffd}A".as_bytes());
        assert_eq!(unquote(b"\xe2\x82x"), "\u{fffd}\u{fffd}x".as_bytes());
        assert_eq!(
            unquote(b"\xed\xa0\x80"),
            "\u{fffd}\u{fffd}\u{fffd}".as_bytes()
        );
        assert_eq!(unquote(br"\u00C9\/"), "É/".as_bytes());
    }

    #[test]
    fn depth_limit_matches_go() {
        let ok = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(validate(ok.as_bytes()).is_ok());
        let deep = format!("{}{}", "[".repeat(10_001), "]".repeat(10_001));
        assert!(validate(deep.as_bytes()).is_err());
        let unclosed = "[".repeat(1_000_000);
        assert!(validate(unclosed.as_bytes()).is_err());
    }

    /// Objects and arrays nested across the 64-level words of [`Opened`]: every closer must
    /// match its own opener at every depth, and the value ends where it should.
    #[test]
    fn skip_value_matches_closers_at_every_depth() {
        // Level i is an object for i % 3 == 0, else an array; objects hold their child under "k".
        let nested = |depth: usize| {
            let mut open = String::new();
            let mut close = String::new();
            for i in 0..depth {
                if i % 3 == 0 {
                    open.push_str("{\"k\": ");
                    close.insert(0, '}');
                } else {
                    open.push_str("[1, ");
                    close.insert(0, ']');
                }
            }
            (open, close)
        };
        for depth in [1, 2, 63, 64, 65, 127, 128, 129, 200] {
            let (open, close) = nested(depth);
            let doc = format!("{open}0{close} ,");
            let mut p = Parser::new(doc.as_bytes());
            assert!(p.skip_value().is_ok(), "depth {depth}");
            assert_eq!(p.offset(), doc.len() - 2, "depth {depth}");
            // The closer at each depth swapped for the other kind is an error.
            for at in [0, depth / 2, depth - 1] {
                let mut wrong = close.clone().into_bytes();
                wrong[at] = if wrong[at] == b'}' { b']' } else { b'}' };
                let doc = format!("{open}0{}", String::from_utf8_lossy(&wrong));
                let error = Parser::new(doc.as_bytes()).skip_value().err();
                assert_eq!(
                    error.map(|e| e.offset),
                    Some(open.len() + 1 + at),
                    "depth {depth}, closer {at} swapped: the error is at that closer"
                );
            }
        }
    }

    #[test]
    fn syntax() {
        for bad in [
            "",
            " ",
            "{",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1,]",
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\u{1}\"",
            "{} {}",
            "\"\\u12\"",
            "[1 2]",
            "{\"a\" 1}",
        ] {
            assert!(validate(bad.as_bytes()).is_err(), "{bad:?}");
        }
        for good in [
            &b"{}"[..],
            b" [ ] ",
            b"\"\\u00e9\"",
            b"-0.5e+3",
            b"{\"a\":[1,{\"b\":null}]}",
            b"\"\xff\"",
        ] {
            assert!(validate(good).is_ok(), "{good:?}");
        }
    }

    /// Literals: the word and the position after it; for a misspelt one, the first byte that
    /// differs (or the end of the input), as Go's scanner reports it.
    #[test]
    fn literals() {
        for (doc, lit) in [
            ("true", "true"),
            ("false", "false"),
            ("null", "null"),
            ("true,", "true"),
            ("  null]", "null"),
            (" \tfalse}", "false"),
        ] {
            let mut p = Parser::new(doc.as_bytes());
            p.ws();
            let at = p.offset();
            assert_eq!(p.literal().ok(), Some(lit.as_bytes()), "{doc:?}");
            assert_eq!(p.offset(), at + lit.len(), "{doc:?}");
        }
        for (doc, at) in [
            ("tru", 3),
            ("trUe", 2),
            ("fals", 4),
            ("falsE", 4),
            ("fxlse", 1),
            ("nul", 3),
            ("nulL", 3),
            ("n", 1),
            ("t", 1),
            (" x", 1),
            ("", 0),
            ("  tru", 5),
            (" nuLL", 3),
        ] {
            let mut p = Parser::new(doc.as_bytes());
            p.ws();
            let err = p.literal().err();
            assert_eq!(err.as_ref().map(|e| e.offset), Some(at), "{doc:?}");
            let msg = err.map(|e| e.to_string()).unwrap_or_default();
            if at == doc.len() {
                assert!(
                    msg.contains("unexpected end of JSON input"),
                    "{doc:?}: {msg}"
                );
            } else {
                assert!(msg.contains("in literal"), "{doc:?}: {msg}");
            }
        }
    }

    /// The scan of a string (16 bytes at once at its start where the CPU can, then eight at
    /// a time, then byte by byte) against a byte-by-byte reading of the grammar: every length
    /// up to 40, an escape (an escaped quote too), a control byte (the lowest, the highest) or
    /// non-ASCII text at every position, the input ending right after the string, long after
    /// it (with non-ASCII text after the closing quote), or inside it. Errors are compared by
    /// where they are found.
    #[test]
    fn string_scan_equals_bytewise_reading() {
        // (end of the text, escaped, non-ASCII), or where the syntax error is.
        fn reference(doc: &[u8]) -> Result<(usize, bool, bool), usize> {
            let (mut i, mut escaped, mut non_ascii) = (1, false, false);
            loop {
                match *doc.get(i).ok_or(i)? {
                    b'"' => return Ok((i, escaped, non_ascii)),
                    b'\\' => {
                        escaped = true;
                        match *doc.get(i + 1).ok_or(i + 1)? {
                            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                            b'u' => {
                                for j in i + 2..i + 6 {
                                    if !doc.get(j).is_some_and(u8::is_ascii_hexdigit) {
                                        return Err(j);
                                    }
                                }
                                i += 6;
                            }
                            _ => return Err(i + 1),
                        }
                    }
                    c if c < 0x20 => return Err(i),
                    c => {
                        non_ascii |= c >= 0x80;
                        i += 1;
                    }
                }
            }
        }
        let inserts: [&[u8]; 11] = [
            b"",
            b"\\n",
            b"\\\"",
            b"\\u00e9",
            b"\\u00",
            b"\x00",
            b"\x1f",
            "\u{e9}".as_bytes(),
            b"\\x",
            b"\xff",
            b" ~",
        ];
        let tails: [&[u8]; 4] = [
            b"\"",
            b"\",\"next\":\"value\"}",
            "\",\"n\u{e9}xt\":\"\u{e9}\"}".as_bytes(),
            b"",
        ];
        let mut checked = 0;
        for len in 0..=40 {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for at in 0..=len {
                for insert in inserts {
                    for tail in tails {
                        let mut doc = b"\"".to_vec();
                        doc.extend_from_slice(&text[..at]);
                        doc.extend_from_slice(insert);
                        doc.extend_from_slice(&text[at..]);
                        doc.extend_from_slice(tail);
                        let mut p = Parser::new(&doc);
                        let got = match p.scan_string() {
                            Ok(sc) => Ok((sc.end, sc.escaped, sc.non_ascii, p.pos)),
                            Err(e) => Err(e.offset),
                        };
                        let want = reference(&doc).map(|(end, e, n)| (end, e, n, end + 1));
                        assert_eq!(got, want, "{:?}", String::from_utf8_lossy(&doc));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 30_000);
    }

    /// [`Parser::int`] (whose usual numbers take the one-word path) against the full reading,
    /// `number` then `parse_int`: the value or the error, and where the parser stops, for
    /// every length up to ten digits, with leading zeros, signs, fractions and exponents,
    /// followed by every byte value (then enough input for the one-word path to run), and at
    /// the input's end.
    #[test]
    fn int_reads_as_the_full_reading() {
        let full = |doc: &[u8], min: i64, max: i64| -> (Result<Option<i64>, String>, usize) {
            let mut p = Parser::new(doc);
            let at = p.pos;
            let r = match p.number() {
                Ok(lit) => match parse_int(lit) {
                    Some(v) if v >= min && v <= max => Ok(Some(v)),
                    _ => p
                        .number_type_error(lit, "int32", at)
                        .map_err(|e| e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            };
            (r, p.pos)
        };
        let mut numbers: Vec<String> = Vec::new();
        for len in 1..=10 {
            // No leading zero: the first digit is 1..=9.
            let digits: String = "1234567890"
                .chars()
                .cycle()
                .skip(len % 9)
                .take(len)
                .collect();
            numbers.push(digits.clone());
            numbers.push(format!("0{digits}"));
            numbers.push(format!("-{digits}"));
            numbers.push(format!("{digits}.5"));
            numbers.push(format!("{digits}e2"));
            numbers.push(format!("{digits}E+2"));
            numbers.push("9".repeat(len));
        }
        numbers.extend(
            ["0", "-0", "0.0", "2147483647", "2147483648", "-2147483648"].map(String::from),
        );
        let mut docs: Vec<Vec<u8>> = Vec::new();
        for n in &numbers {
            docs.push(n.clone().into_bytes());
            for after in 0..=255u8 {
                let mut doc = n.clone().into_bytes();
                doc.push(after);
                docs.push(doc.clone());
                doc.extend_from_slice(b" 1234567,\"k\":1}");
                docs.push(doc);
            }
        }
        for doc in &docs {
            for (min, max) in [
                (i64::from(i32::MIN), i64::from(i32::MAX)),
                (i64::MIN, i64::MAX),
            ] {
                let mut p = Parser::new(doc);
                let got = p.int(min, max, "int32").map_err(|e| e.to_string());
                assert_eq!(
                    (got, p.pos),
                    full(doc, min, max),
                    "{:?}",
                    String::from_utf8_lossy(doc)
                );
            }
        }
    }

    #[test]
    fn ints() {
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int(b"9223372036854775808"), None);
        assert_eq!(parse_int(b"1e3"), None);
        assert_eq!(parse_int(b"-0"), Some(0));
    }
}
