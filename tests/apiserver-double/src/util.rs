//! Small helpers: timestamps, uids, query strings, JSON navigation.
//! Hand-rolled because each is a few lines and a crate would cost build time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// RFC 3339 timestamp with second precision, as `metav1.Time` serializes.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Seconds since the epoch to `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

static SEED: AtomicU64 = AtomicU64::new(0);

/// A cheap pseudo-random u64: uniqueness within a test run is all that matters.
pub fn rand_u64() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    // splitmix64 finaliser
    let mut z = nanos ^ n;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A UUID-shaped uid (version 4 layout).
pub fn new_uid() -> String {
    let a = rand_u64();
    let b = rand_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// The 5-character suffix the real server appends for `generateName`
/// (its alphabet avoids vowels and look-alike characters).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = rand_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
            r /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Decode `application/x-www-form-urlencoded` text; `None` on bad escapes.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Parse a query string into a map (last value wins, as Go's `Get` returns the first;
/// clients never repeat these parameters).
pub fn parse_query(q: Option<&str>) -> Option<HashMap<String, String>> {
    let mut map = HashMap::new();
    let Some(q) = q else { return Some(map) };
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        map.insert(percent_decode(k)?, percent_decode(v)?);
    }
    Some(map)
}

/// Hex encoding for opaque continue tokens.
pub fn hex_encode(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

pub fn hex_decode(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Read a dotted path of object keys.
pub fn get_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |cur, key| cur.get(key))
}

pub fn get_str<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    get_path(v, path).and_then(Value::as_str)
}

/// The `metadata` map of an object, created if missing; `None` if the object is not a map.
pub fn meta_mut(v: &mut Value) -> Option<&mut Map<String, Value>> {
    let obj = v.as_object_mut()?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

pub fn name_of(v: &Value) -> &str {
    get_str(v, "metadata.name").unwrap_or("")
}

pub fn namespace_of(v: &Value) -> &str {
    get_str(v, "metadata.namespace").unwrap_or("")
}

pub fn rv_of(v: &Value) -> &str {
    get_str(v, "metadata.resourceVersion").unwrap_or("")
}

/// Finalizer names of an object.
pub fn finalizers(v: &Value) -> Vec<String> {
    get_path(v, "metadata.finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The object without `metadata` and `status`: what `generation` tracks.
pub fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
    }

    #[test]
    fn decodes_queries() {
        let q = parse_query(Some("labelSelector=app+in+%28a%2Cb%29&watch=1")).unwrap();
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert!(parse_query(Some("a=%zz")).is_none());
        assert_eq!(hex_decode(&hex_encode("5\0ns/a")).unwrap(), "5\0ns/a");
    }
}
