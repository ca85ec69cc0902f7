//! Pod and container cgroups: paths for the cgroupfs and systemd drivers on cgroup v1 and v2.
