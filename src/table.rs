//! Plain-text tables for the command-line answers (`inplaced pods`, `upgrade-check`).

use std::fmt::Write as _;

/// Rows as columns padded to their widest cell, two spaces apart, one line each.
pub(crate) fn aligned<R: AsRef<[String]>>(rows: &[R]) -> String {
    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}
