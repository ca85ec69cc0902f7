//! In-memory Kubernetes API server double (issue 5).
