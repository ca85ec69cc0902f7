//! `resource.Quantity` as apimachinery parses and prints it (behaviour of releases 1.20–1.36).
//!
//! What the kubelet hashes is `json.Marshal` of a Quantity: the *cached original string* when the
//! parser's fast path cached it, otherwise the canonical form. Both paths are reproduced here
//! exactly, including their oddities:
//! - only the fast path caches, and only when the text already looks canonical
//!   (decimal: `scale%3==0`, no `000` suffix, no leading `0`; binary: `value&7 != 0`);
//! - the fast path handles at most 18 significant digits; everything else goes through an
//!   arbitrary-precision path that rounds non-zero values away from zero to nano precision, caps
//!   BinarySI at 2^63-1 and turns BinarySI values in (0,1) into DecimalSI;
//! - exponent arithmetic of the fast path is 32-bit and wraps as Go's does;
//! - a DecimalSI value whose canonical exponent has no SI suffix (above `E`) loses its suffix, as
//!   in every release up to 1.36 (fixed upstream only in 2026; era C never hashes quantities).
//!
//! Decision: inputs whose exact expansion Go would have to materialise as a gigantic number (the
//! arbitrary-precision path with an exponent in the millions) are refused with
//! [`QuantityError::TooLarge`] instead: Go would need gigabytes for them, and we keep memory
//! bounded by the input size.

use std::cmp::Ordering;

/// Why a quantity string is rejected (messages follow apimachinery's wording where it has one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    FormatWrong,
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
    #[error("quantity is too large to expand exactly (Go would need gigabytes of memory for it)")]
    TooLarge,
}

/// The unit family a quantity remembers from its suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// A parsed quantity: enough to print it exactly as `Quantity.MarshalJSON` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    /// The original text when apimachinery caches it (printed verbatim).
    cached: Option<String>,
    amount: Amount,
    format: Format,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Amount {
    /// `value * 10^scale` (apimachinery's int64Amount).
    I64 { value: i64, scale: i32 },
    /// Arbitrary precision (apimachinery's inf.Dec), kept normalised.
    Dec(Decimal),
}

/// `±digits × 10^exp`; `digits` has no leading or trailing zeros; empty digits means zero.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// Bound on zeros appended when Go would expand a number (see module docs).
const MAX_EXPANSION: i64 = 1 << 20;
const NANO: i32 = -9;
const MAX_I64_DIGITS: &[u8] = b"9223372036854775807";

impl Quantity {
    /// The zero value of the Go type (what `null` decodes to in a fresh map entry).
    pub fn zero() -> Self {
        Quantity {
            cached: None,
            amount: Amount::I64 { value: 0, scale: 0 },
            format: Format::DecimalSI,
        }
    }

    /// Parses like `ParseQuantity` (the caller trims whitespace as `UnmarshalJSON` does).
    pub fn parse(s: &[u8]) -> Result<Self, QuantityError> {
        parse_quantity(s)
    }

    /// Whether apimachinery would print the original text verbatim.
    #[cfg(test)]
    pub(crate) fn is_cached(&self) -> bool {
        self.cached.is_some()
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The string `MarshalJSON` puts between the quotes.
    pub fn to_json_text(&self) -> Result<String, QuantityError> {
        match &self.cached {
            Some(s) if !s.is_empty() => Ok(s.clone()),
            _ => self.canonical(),
        }
    }

    /// The canonical form (`CanonicalizeBytes`), ignoring any cached text.
    pub fn canonical(&self) -> Result<String, QuantityError> {
        canonicalize(&self.amount, self.format)
    }
}

/// Integer views of the value (`Value` / `MilliValue`), for resource arithmetic.
///
/// Rounding is away from zero in both representations, as apimachinery's test tables pin it
/// (`TestNegativeValueRoundsAwayFromZero`): non-negative values, all that resource requests and
/// limits can hold, round up. Where apimachinery saturates or wraps (outside i64) these return
/// `None`.
impl Quantity {
    /// Whole units, rounded away from zero.
    pub fn value(&self) -> Option<i64> {
        self.scaled_value(0)
    }

    /// Thousandths of a unit (millicores for cpu), rounded away from zero.
    pub(crate) fn milli_value(&self) -> Option<i64> {
        self.scaled_value(3)
    }

    /// The value times 10^shift, rounded away from zero to an integer, if it fits an i64.
    fn scaled_value(&self, shift: i64) -> Option<i64> {
        let owned;
        let (neg, digits, exp): (bool, &[u8], i64) = match &self.amount {
            Amount::I64 { value, scale } => {
                owned = value.unsigned_abs().to_string().into_bytes();
                (*value < 0, &owned, i64::from(*scale))
            }
            Amount::Dec(d) => (d.neg, &d.digits, d.exp),
        };
        let exp = exp + shift;
        let significant = digits.iter().skip_while(|&&c| c == b'0').count() as i64;
        if significant == 0 {
            return Some(0);
        }
        // Digits left of the point once the leading zeros are gone; i64 holds at most 19.
        if significant + exp > 19 {
            return None;
        }
        let (int_digits, fraction): (&[u8], &[u8]) = if exp >= 0 {
            (digits, &[])
        } else {
            let split = (digits.len() as i64 + exp).max(0) as usize;
            digits.split_at(split)
        };
        let mut magnitude: u128 = 0;
        for &c in int_digits {
            magnitude = magnitude * 10 + u128::from(c - b'0');
        }
        for _ in 0..exp.max(0) {
            magnitude *= 10;
        }
        if fraction.iter().any(|&c| c != b'0') {
            magnitude += 1;
        }
        if neg {
            i64::try_from(-i128::try_from(magnitude).ok()?).ok()
        } else {
            i64::try_from(magnitude).ok()
        }
    }
}

/// Trims whitespace like Go's `strings.TrimSpace` (Unicode White_Space; invalid UTF-8 stops).
pub fn go_trim_space(mut s: &[u8]) -> &[u8] {
    while let Some((c, n)) = first_rune(s) {
        if !is_go_space(c) {
            break;
        }
        s = &s[n..];
    }
    while let Some((c, n)) = last_rune(s) {
        if !is_go_space(c) {
            break;
        }
        s = &s[..s.len() - n];
    }
    s
}

fn is_go_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{0B}'
            | '\u{0C}'
            | '\r'
            | ' '
            | '\u{85}'
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

fn first_rune(s: &[u8]) -> Option<(char, usize)> {
    let b = *s.first()?;
    if b < 0x80 {
        return Some((b as char, 1));
    }
    let n = match b {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let chunk = s.get(..n)?;
    let c = std::str::from_utf8(chunk).ok()?.chars().next()?;
    Some((c, n))
}

fn last_rune(s: &[u8]) -> Option<(char, usize)> {
    let last = *s.last()?;
    if last < 0x80 {
        return Some((last as char, 1));
    }
    for n in 2..=4usize.min(s.len()) {
        let chunk = &s[s.len() - n..];
        if let Ok(st) = std::str::from_utf8(chunk) {
            return st.chars().next().map(|c| (c, n));
        }
    }
    None
}

struct Parts<'s> {
    positive: bool,
    /// Sign, integer and fraction digits: what the arbitrary-precision path reads.
    value: &'s [u8],
    num: &'s [u8],
    denom: &'s [u8],
    suffix: &'s [u8],
}

/// apimachinery's hand-written scanner (`parseQuantityString`), step by step.
fn split_quantity(s: &[u8]) -> Result<Parts<'_>, QuantityError> {
    let end = s.len();
    let mut pos = 0;
    let mut positive = true;
    if let Some(&c) = s.first() {
        if c == b'-' {
            positive = false;
            pos += 1;
        } else if c == b'+' {
            pos += 1;
        }
    }
    // Leading zeros; an all-zero remainder is the number zero.
    loop {
        if pos >= end {
            return Ok(Parts {
                positive,
                value: b"0",
                num: b"0",
                denom: b"",
                suffix: b"",
            });
        }
        if s[pos] == b'0' {
            pos += 1;
        } else {
            break;
        }
    }
    let num_start = pos;
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    let mut num = &s[num_start..pos];
    if pos >= end {
        return Ok(Parts {
            positive,
            value: s,
            num,
            denom: b"",
            suffix: b"",
        });
    }
    if num.is_empty() {
        num = b"0";
    }
    let mut denom: &[u8] = b"";
    if s[pos] == b'.' {
        pos += 1;
        let d_start = pos;
        while pos < end && s[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d_start..pos];
        if pos >= end {
            return Ok(Parts {
                positive,
                value: s,
                num,
                denom,
                suffix: b"",
            });
        }
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&s[pos]) {
        pos += 1;
    }
    if pos < end && (s[pos] == b'-' || s[pos] == b'+') {
        pos += 1;
    }
    while pos < end {
        if !s[pos].is_ascii_digit() {
            return Err(QuantityError::FormatWrong);
        }
        pos += 1;
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// Go's `strconv.ParseInt(s, 10, 64)`.
fn go_parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

/// (base, exponent, format) for a suffix, as apimachinery's suffixer interprets it.
fn interpret_suffix(s: &[u8]) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match s {
        b"" => dec(0),
        b"n" => dec(-9),
        b"u" => dec(-6),
        b"m" => dec(-3),
        b"k" => dec(3),
        b"M" => dec(6),
        b"G" => dec(9),
        b"T" => dec(12),
        b"P" => dec(15),
        b"E" => dec(18),
        b"Ki" => bin(10),
        b"Mi" => bin(20),
        b"Gi" => bin(30),
        b"Ti" => bin(40),
        b"Pi" => bin(50),
        b"Ei" => bin(60),
        _ if s.len() > 1 && (s[0] == b'e' || s[0] == b'E') => {
            // Go truncates the parsed int64 to int32 here.
            go_parse_i64(&s[1..]).map(|e| (10, e as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn parse_quantity(s: &[u8]) -> Result<Quantity, QuantityError> {
    let (amount, format, cached) = parse_inner(s)?;
    Ok(Quantity {
        cached: cached.then(|| String::from_utf8_lossy(s).into_owned()),
        amount,
        format,
    })
}

/// What `json.Marshal` prints for the quantity `s` (already trimmed): `Ok(None)` when it prints
/// `s` itself (cached), else the canonical text. Allocation-free on the cached path.
pub(crate) fn json_text(s: &[u8]) -> Result<Option<String>, QuantityError> {
    let (amount, format, cached) = parse_inner(s)?;
    if cached {
        Ok(None)
    } else {
        canonicalize(&amount, format).map(Some)
    }
}

/// Only checks that apimachinery would accept `s`.
pub(crate) fn validate(s: &[u8]) -> Result<(), QuantityError> {
    if plain_quantity(s) {
        return Ok(());
    }
    parse_inner(s).map(|_| ())
}

/// True for quantities apimachinery accepts in their usual spelling, known without parsing: an
/// unsigned decimal of at most 15 digits (no leading zero) and at most 6 after a point, and one
/// of the common suffixes. Anything else is parsed in full.
fn plain_quantity(t: &[u8]) -> bool {
    let whole = t.iter().take_while(|c| c.is_ascii_digit()).count();
    if whole == 0 || whole > 15 || (whole > 1 && t.first() == Some(&b'0')) {
        return false;
    }
    let mut rest = t.get(whole..).unwrap_or_default();
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 6 {
            return false;
        }
        rest = fraction.get(n..).unwrap_or_default();
    }
    matches!(
        rest,
        b"" | b"m" | b"k" | b"M" | b"G" | b"T" | b"P" | b"Ki" | b"Mi" | b"Gi" | b"Ti" | b"Pi"
    )
}

/// The digits `num` followed by `denom` as one string (apimachinery's `shifted`).
struct Shifted<'s>(&'s [u8], &'s [u8]);

impl Shifted<'_> {
    fn len(&self) -> usize {
        self.0.len() + self.1.len()
    }
    fn byte(&self, i: usize) -> u8 {
        if i < self.0.len() {
            self.0[i]
        } else {
            self.1[i - self.0.len()]
        }
    }
    fn ends_with_000(&self) -> bool {
        let n = self.len();
        n >= 3 && (n - 3..n).all(|i| self.byte(i) == b'0')
    }
    /// `strconv.ParseInt(shifted, 10, 64)` (all digits, at most 18 of them here).
    fn parse(&self) -> Option<i64> {
        if self.len() == 0 {
            return None;
        }
        let mut v: i64 = 0;
        for i in 0..self.len() {
            let d = self.byte(i);
            if !d.is_ascii_digit() {
                return None;
            }
            v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
        }
        Some(v)
    }
}

fn parse_inner(s: &[u8]) -> Result<(Amount, Format, bool), QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    if s == b"0" {
        return Ok((Amount::I64 { value: 0, scale: 0 }, Format::DecimalSI, true));
    }
    let parts = split_quantity(s)?;
    let (base, exponent, format) = interpret_suffix(parts.suffix).ok_or(QuantityError::Suffix)?;
    let digits_len = (parts.num.len() + parts.denom.len()) as i64;

    let (precision, mut scale, mantissa): (i64, i32, i64) = match format {
        Format::DecimalExponent | Format::DecimalSI => (18 - digits_len, exponent, 1),
        Format::BinarySI => {
            if exponent >= 0 && parts.denom.is_empty() {
                let p = 15 - parts.num.len() as i64 - i64::from(exponent * 3 / 10) - 1;
                (p, 0, 1i64 << exponent)
            } else {
                (-1, 0, 1)
            }
        }
    };
    if precision >= 0 {
        scale = scale.wrapping_sub(parts.denom.len() as i32);
        if scale >= NANO {
            let shifted = Shifted(parts.num, parts.denom);
            let value = shifted.parse().ok_or(QuantityError::Numeric)?;
            if let Some(mut result) = go_mul_i64(value, mantissa) {
                if !parts.positive {
                    result = -result;
                }
                let cache = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 7 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with_000() && shifted.byte(0) != b'0',
                };
                return Ok((
                    Amount::I64 {
                        value: result,
                        scale,
                    },
                    format,
                    cache,
                ));
            }
        }
    }
    let q = slow_path(&parts, base, exponent, format)?;
    Ok((q.amount, q.format, false))
}

/// apimachinery's `int64Multiply`.
fn go_mul_i64(a: i64, b: i64) -> Option<i64> {
    if a == 0 || b == 0 || a == 1 || b == 1 {
        return Some(a.wrapping_mul(b));
    }
    if a == i64::MIN || b == i64::MIN {
        return None;
    }
    a.checked_mul(b)
}

/// The inf.Dec path of `ParseQuantity`.
fn slow_path(
    parts: &Parts<'_>,
    base: u32,
    exponent: i32,
    mut format: Format,
) -> Result<Quantity, QuantityError> {
    // inf.Dec's scanner: optional sign, digits with at most one '.', at least one digit.
    let v = parts.value;
    let body = match v.first() {
        Some(b'+') | Some(b'-') => &v[1..],
        _ => v,
    };
    let mut digits = Vec::with_capacity(body.len());
    let mut frac_len: i64 = 0;
    let mut seen_dot = false;
    for &c in body {
        if c == b'.' {
            seen_dot = true;
        } else {
            digits.push(c);
            if seen_dot {
                frac_len += 1;
            }
        }
    }
    if digits.is_empty() {
        return Err(QuantityError::Numeric);
    }
    let neg = v.first() == Some(&b'-');
    let mut exp = -frac_len;
    if base == 10 {
        exp += i64::from(exponent);
        // Go keeps this scale in an int32; beyond that its arithmetic wraps into nonsense.
        if exp > i64::from(i32::MAX) || exp < -i64::from(i32::MAX) {
            return Err(QuantityError::TooLarge);
        }
    }
    let mut d = Decimal::new(neg, digits, exp);
    if base == 2 {
        d.mul_small(1u128 << exponent);
    }
    if !d.is_zero() {
        d.round_up_to_nano()?;
    }
    if format == Format::BinarySI {
        let max = Decimal::new(false, MAX_I64_DIGITS.to_vec(), 0);
        if d.cmp_abs(&max) == Ordering::Greater {
            d = Decimal::new(d.neg, MAX_I64_DIGITS.to_vec(), 0);
        }
        if !d.is_zero() && d.adjusted() <= 0 {
            // |d| < 1 (normalised: the most significant digit sits below the units place).
            format = Format::DecimalSI;
        }
    }
    Ok(Quantity {
        cached: None,
        amount: Amount::Dec(d),
        format,
    })
}

impl Decimal {
    fn new(neg: bool, digits: Vec<u8>, exp: i64) -> Self {
        let mut d = Decimal { neg, digits, exp };
        d.normalize();
        d
    }

    fn normalize(&mut self) {
        let lead = self.digits.iter().take_while(|&&c| c == b'0').count();
        if lead > 0 {
            self.digits.drain(..lead);
        }
        let trail = self.digits.iter().rev().take_while(|&&c| c == b'0').count();
        self.digits.truncate(self.digits.len() - trail);
        self.exp += trail as i64;
        if self.digits.is_empty() {
            self.exp = 0;
            self.neg = false;
        }
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Position of the most significant digit: value in [10^(adj-1), 10^adj).
    fn adjusted(&self) -> i64 {
        self.digits.len() as i64 + self.exp
    }

    fn mul_small(&mut self, m: u128) {
        let mut carry: u128 = 0;
        for c in self.digits.iter_mut().rev() {
            let cur = u128::from(*c - b'0') * m + carry;
            *c = b'0' + (cur % 10) as u8;
            carry = cur / 10;
        }
        let mut prefix = Vec::new();
        while carry > 0 {
            prefix.push(b'0' + (carry % 10) as u8);
            carry /= 10;
        }
        prefix.reverse();
        prefix.extend_from_slice(&self.digits);
        self.digits = prefix;
        self.normalize();
    }

    /// inf.Dec Round(9, RoundUp) on the magnitude: away from zero.
    fn round_up_to_nano(&mut self) -> Result<(), QuantityError> {
        let target = i64::from(NANO);
        if self.exp >= target {
            return Ok(());
        }
        let drop = target - self.exp;
        if drop >= self.digits.len() as i64 {
            self.digits = vec![b'1'];
        } else {
            let keep = self.digits.len() - drop as usize;
            self.digits.truncate(keep);
            // The dropped part is non-zero (normalised digits end in a non-zero digit).
            increment(&mut self.digits);
        }
        self.exp = target;
        self.normalize();
        Ok(())
    }

    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        match self.adjusted().cmp(&other.adjusted()) {
            Ordering::Equal => {}
            o => return o,
        }
        let n = self.digits.len().max(other.digits.len());
        for i in 0..n {
            let a = self.digits.get(i).copied().unwrap_or(b'0');
            let b = other.digits.get(i).copied().unwrap_or(b'0');
            match a.cmp(&b) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        Ordering::Equal
    }

    /// The integer value if it is one and fits an i64.
    fn as_i64(&self) -> Option<i64> {
        if self.exp < 0 {
            return None;
        }
        if self.adjusted() > 19 {
            return None;
        }
        let mut v: i128 = 0;
        for &c in &self.digits {
            v = v * 10 + i128::from(c - b'0');
        }
        for _ in 0..self.exp {
            v *= 10;
        }
        if self.neg {
            v = -v;
        }
        i64::try_from(v).ok()
    }
}

fn increment(digits: &mut Vec<u8>) {
    for c in digits.iter_mut().rev() {
        if *c == b'9' {
            *c = b'0';
        } else {
            *c += 1;
            return;
        }
    }
    digits.insert(0, b'1');
}

fn decimal_suffix(exp: i32) -> Option<&'static str> {
    Some(match exp {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

fn binary_suffix(times: u32) -> &'static str {
    match times {
        1 => "Ki",
        2 => "Mi",
        3 => "Gi",
        4 => "Ti",
        5 => "Pi",
        6 => "Ei",
        // No binary suffix for 1024^0 (and none exists beyond Ei): Go emits the bare number.
        _ => "",
    }
}

fn amount_is_zero(a: &Amount) -> bool {
    match a {
        Amount::I64 { value, .. } => *value == 0,
        Amount::Dec(d) => d.is_zero(),
    }
}

fn canonicalize(amount: &Amount, format: Format) -> Result<String, QuantityError> {
    if amount_is_zero(amount) {
        return Ok("0".to_owned());
    }
    let mut format = format;
    if format == Format::BinarySI {
        // BinarySI only for integers with |v| >= 1024.
        let int = match amount {
            Amount::I64 { value, scale } => {
                if *value > -1024 && *value < 1024 && *scale == 0 {
                    None
                } else if *scale >= 0 {
                    i64_scaled(*value, *scale)
                } else {
                    None
                }
            }
            Amount::Dec(d) => {
                let small = d.cmp_abs(&Decimal::new(false, b"1024".to_vec(), 0)) == Ordering::Less;
                if small { None } else { d.as_i64() }
            }
        };
        match int {
            Some(v) => {
                let (mut m, mut times) = (v, 0u32);
                let neg = m < 0;
                if neg {
                    m = m.wrapping_neg();
                }
                while m >= 1024 && m % 1024 == 0 {
                    m /= 1024;
                    times += 1;
                }
                if neg {
                    m = m.wrapping_neg();
                }
                return Ok(format!("{m}{}", binary_suffix(times)));
            }
            None => format = Format::DecimalSI,
        }
    }
    let (number, exp) = match amount {
        Amount::I64 { value, scale } => i64_canonical(*value, *scale)?,
        Amount::Dec(d) => dec_canonical(d)?,
    };
    let suffix = match format {
        Format::DecimalExponent => {
            if exp == 0 {
                String::new()
            } else {
                format!("e{exp}")
            }
        }
        // Releases up to 1.36 drop the suffix when none exists (see module docs).
        _ => decimal_suffix(exp).unwrap_or("").to_owned(),
    };
    Ok(number + &suffix)
}

/// `value * 10^scale` for scale >= 0 if it fits (apimachinery's positiveScaleInt64).
fn i64_scaled(value: i64, scale: i32) -> Option<i64> {
    let mut v = value;
    for _ in 0..scale {
        v = v.checked_mul(10)?;
    }
    Some(v)
}

/// int64Amount.AsCanonicalBytes: strip factors of ten, floor the exponent to a multiple of 3.
fn i64_canonical(value: i64, scale: i32) -> Result<(String, i32), QuantityError> {
    let neg = value < 0;
    let mut m = if neg { value.wrapping_neg() } else { value };
    let mut times = 0i32;
    while m >= 10 && m % 10 == 0 {
        m /= 10;
        times += 1;
    }
    if neg {
        m = m.wrapping_neg();
    }
    let mut exp = scale.wrapping_add(times);
    let adjusted = match exp % 3 {
        1 | -2 => m.checked_mul(10).map(|v| (v, exp.wrapping_sub(1))),
        2 | -1 => m.checked_mul(100).map(|v| (v, exp.wrapping_sub(2))),
        _ => Some((m, exp)),
    };
    match adjusted {
        Some((v, e)) => {
            exp = e;
            Ok((v.to_string(), exp))
        }
        None => {
            // Overflow: apimachinery falls back to the inf.Dec form of the same amount.
            let d = Decimal::new(
                neg,
                value.unsigned_abs().to_string().into_bytes(),
                i64::from(scale),
            );
            dec_canonical(&d)
        }
    }
}

/// infDecAmount.AsCanonicalBytes: strip tens, floor to a multiple of 3, cap the exponent at 18.
fn dec_canonical(d: &Decimal) -> Result<(String, i32), QuantityError> {
    let mut exp = d.exp;
    let mut zeros: i64 = 0;
    while exp % 3 != 0 {
        zeros += 1;
        exp -= 1;
    }
    if exp > 18 {
        zeros += exp - 18;
        exp = 18;
    }
    if zeros > MAX_EXPANSION {
        return Err(QuantityError::TooLarge);
    }
    let exp32 = i32::try_from(exp).map_err(|_| QuantityError::TooLarge)?;
    let mut out = String::with_capacity(d.digits.len() + zeros as usize + 1);
    if d.neg {
        out.push('-');
    }
    out.push_str(&String::from_utf8_lossy(&d.digits));
    for _ in 0..zeros {
        out.push('0');
    }
    Ok((out, exp32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &str) -> String {
        Quantity::parse(go_trim_space(s.as_bytes()))
            .and_then(|q| q.to_json_text())
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn apimachinery_canonical_vectors() {
        let cases = [
            ("1024Mi", "1Gi"),
            ("307200Ki", "300Mi"),
            ("1025024Mi", "1001Gi"),
            ("1024Gi", "1Ti"),
            ("5000m", "5"),
            ("0.5", "500m"),
            ("1000M", "1G"),
            ("0.001T", "1G"),
            ("1000u", "1m"),
            ("1.08", "1080m"),
            ("1080000000n", "1080m"),
            (".001e12", "1e9"),
            ("0.001e0", "1e-3"),
            ("1000e-12", "1e-9"),
            ("00", "0"),
            ("1Ki", "1Ki"),
            (".001Ki", "1024m"),
            (".000001Ki", "1024u"),
            (".000000001Ki", "1024n"),
            (".000000000001Ki", "2n"),
            ("3.001n", "4n"),
            ("0.9n", "1n"),
            ("0.00000012345", "124n"),
            ("1.1E-9", "2e-9"),
            ("0.5Mi", "512Ki"),
            (".0001k", "100m"),
            ("1E6", "1E6"),
            ("+1G", "+1G"),
            ("01G", "01G"),
            ("0010m", "0010m"),
            ("1.000001", "1.000001"),
            ("5.", "5."),
            ("1e3", "1e3"),
        ];
        for (input, want) in cases {
            assert_eq!(json(input), want, "input {input}");
            if input != "00" && !input.starts_with('+') {
                let neg = format!("-{input}");
                let got = json(&neg);
                // Cached inputs keep their own text; canonical ones gain a leading minus.
                let q = Quantity::parse(neg.as_bytes()).unwrap_or_else(|_| Quantity::zero());
                let expect = if q.is_cached() {
                    neg.clone()
                } else {
                    format!("-{want}")
                };
                assert_eq!(got, expect, "input {neg}");
            }
        }
    }

    #[test]
    fn rejects_like_go() {
        for bad in [
            "", "abc", "1.5.5", "1Kb", "e", "1e", "1e+", "-.e-100x", "1 G", "\\u0031",
        ] {
            assert!(
                Quantity::parse(bad.as_bytes()).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert_eq!(Quantity::parse(b"-.e-100"), Err(QuantityError::Numeric));
        assert_eq!(json("-"), "0");
        assert_eq!(json("e5"), "0");
    }

    #[test]
    fn wrapping_and_limits() {
        assert_eq!(json("1000e2147483647"), "1e-2147483646");
        assert_eq!(json("1000E"), "1");
        // Go would try to print two billion digits here; we refuse instead.
        let huge = Quantity::parse(b"1234567890123456789e2000000000");
        assert_eq!(
            huge.and_then(|q| q.to_json_text()),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(json("8Ei"), "9223372036854775807");
        assert_eq!(json("-8Ei"), "-9223372036854775807");
    }

    #[test]
    fn trim_space() {
        assert_eq!(go_trim_space(" \u{a0}1Gi\u{3000} ".as_bytes()), b"1Gi");
        assert_eq!(go_trim_space(b"\xff 1"), b"\xff 1");
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// The exact value as a normalised (sign, digits, exponent) triple.
    fn exact(q: &Quantity) -> (bool, Vec<u8>, i64) {
        let d = match &q.amount {
            Amount::I64 { value, scale } => Decimal::new(
                *value < 0,
                value.unsigned_abs().to_string().into_bytes(),
                i64::from(*scale),
            ),
            Amount::Dec(d) => d.clone(),
        };
        (d.neg, d.digits, d.exp)
    }

    fn quantity_text() -> impl Strategy<Value = String> {
        let suffix = prop_oneof![
            Just(String::new()),
            prop::sample::select(vec![
                "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"
            ])
            .prop_map(str::to_owned),
            (prop::sample::select(vec!["e", "E"]), -20i32..20).prop_map(|(e, n)| format!("{e}{n}")),
        ];
        (
            prop::sample::select(vec!["", "+", "-"]),
            "[0-9]{0,22}",
            prop::option::of("[0-9]{0,12}"),
            suffix,
        )
            .prop_map(|(sign, int, frac, suf)| match frac {
                Some(f) => format!("{sign}{int}.{f}{suf}"),
                None => format!("{sign}{int}{suf}"),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// parse(canonical(q)) has q's value, and canonicalising is idempotent (from the second
        /// round for a binary quantity printed as a plain integer).
        #[test]
        fn canonical_round_trip(text in quantity_text()) {
            let Ok(q) = Quantity::parse(text.as_bytes()) else { return Ok(()); };
            let Ok(c1) = q.canonical() else { return Ok(()); };
            let (_, digits, exp) = exact(&q);
            // Releases up to 1.36 drop the suffix above E (see module docs): not a round trip.
            prop_assume!(q.format() == Format::BinarySI || digits.is_empty() || digits.len() as i64 + exp <= 21);
            let q2 = Quantity::parse(c1.as_bytes());
            prop_assert!(q2.is_ok(), "canonical {c1:?} of {text:?} does not parse");
            let q2 = q2.unwrap();
            prop_assert_eq!(exact(&q2), exact(&q), "value changed: {:?} -> {:?}", text, c1);
            let c2 = q2.canonical();
            if q.format() == Format::BinarySI && c1.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                // A binary quantity that is no whole number of Ki prints as a plain integer
                // (Go: "468.75Ki" -> "480000"), which reads back as decimal ("480k"): idempotent
                // from the second round on, in Go as here.
                let c3 = Quantity::parse(c2.as_deref().unwrap_or_default().as_bytes()).and_then(|q3| q3.canonical());
                prop_assert_eq!(c3.as_deref(), c2.as_deref(), "canonical not idempotent for {:?}", text);
            } else {
                prop_assert_eq!(c2.as_deref(), Ok(c1.as_str()), "canonical not idempotent for {:?}", text);
            }
            // And what json.Marshal prints parses back to the same value too.
            let j = q.to_json_text().unwrap();
            prop_assert_eq!(exact(&Quantity::parse(j.as_bytes()).unwrap()), exact(&q));
        }

        /// Validating (with its shortcut for the usual spellings) accepts exactly what parsing
        /// accepts.
        #[test]
        fn validate_agrees_with_parse(text in quantity_text()) {
            prop_assert_eq!(validate(text.as_bytes()).is_ok(), Quantity::parse(text.as_bytes()).is_ok(), "{:?}", text);
        }

        /// Never panics on arbitrary bytes.
        #[test]
        fn parse_total(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(q) = Quantity::parse(&bytes) {
                let _ = q.to_json_text();
            }
        }
    }
}

#[cfg(test)]
mod value_tests {
    use super::*;

    fn parsed(s: &str) -> Quantity {
        Quantity::parse(s.as_bytes()).unwrap_or_else(|e| panic!("{s:?} does not parse: {e}"))
    }

    /// apimachinery quantity_test.go `TestNegativeValueRoundsAwayFromZero`:
    /// (input, Value(), MilliValue()).
    #[test]
    fn rounds_away_from_zero_like_apimachinery() {
        let cases = [
            ("-.484785E-7466", -1, -1),
            (".484785E-7466", 1, 1),
            ("-.484785E-1", -1, -49),
            (".484785E-1", 1, 49),
            ("-0.0005", -1, -1),
            ("0.0005", 1, 1),
            ("-1500m", -2, -1500),
            ("1500m", 2, 1500),
            ("-9.5000000001Gi", -10200547329, -10200547328108),
            ("9.5000000001Gi", 10200547329, 10200547328108),
            ("-1", -1, -1000),
            ("1", 1, 1000),
            ("0", 0, 0),
        ];
        for (input, value, milli) in cases {
            let q = parsed(input);
            assert_eq!(q.value(), Some(value), "value of {input}");
            assert_eq!(q.milli_value(), Some(milli), "milli value of {input}");
        }
    }

    /// `TestNewSet` / `TestQuantityValueSet` (Value) and `TestMilliNewSet` (MilliValue) round
    /// trips, and `TestNewScaledSet` / `TestScaledValue` for the sub-unit suffixes.
    #[test]
    fn values_of_suffixed_quantities() {
        for (input, value) in [
            ("1", 1),
            ("1k", 1000),
            ("1234k", 1_234_000),
            ("1Ki", 1024),
            ("1e6", 1_000_000),
            ("1Mi", 1_048_576),
            ("1n", 1),
            ("1u", 1),
            ("1m", 1),
        ] {
            assert_eq!(parsed(input).value(), Some(value), "value of {input}");
        }
        for (input, milli) in [
            ("1m", 1),
            ("1", 1000),
            ("1234", 1_234_000),
            ("1e3", 1_000_000),
            ("1n", 1),
            ("1u", 1),
        ] {
            assert_eq!(parsed(input).milli_value(), Some(milli), "milli of {input}");
        }
    }

    /// `TestQuantityDecOnlyOverflow` (Value at the i64 edges) and `TestQuantityValueSaturates`
    /// (MilliValue of MaxInt64 overflows): where apimachinery reports ok=false, we give None.
    #[test]
    fn none_outside_i64() {
        let value_cases = [
            ("1e100", None),
            ("-1e100", None),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
        ];
        for (input, want) in value_cases {
            assert_eq!(parsed(input).value(), want, "value of {input}");
        }
        assert_eq!(parsed("9223372036854775807").milli_value(), None);
    }
}
