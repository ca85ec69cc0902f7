//! apimachinery's Quantity parser and printer must never panic; whatever parses prints, and
//! its canonical form parses again (unless refused as too large).
#![no_main]

use inplaced::quantity::{Quantity, go_trim_space};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(q) = Quantity::parse(go_trim_space(data)) else {
        return;
    };
    let _ = q.to_json_text();
    if let Ok(c) = q.canonical() {
        assert!(
            Quantity::parse(c.as_bytes()).is_ok(),
            "canonical {c:?} does not parse"
        );
    }
});
