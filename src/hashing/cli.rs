//! `inplaced hash` (placeholder, filled in below).
