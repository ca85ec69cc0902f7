//! Kubelet-compatible container hashes (see issue 3).
