//! The pod cgroup as a systemd unit. Under kubelet's systemd cgroup driver the pod cgroup is a
//! slice (`kubepods-burstable-pod<uid_>.slice`) and its limits are unit properties, which systemd
//! writes to the cgroup again whenever it re-applies the unit: `systemctl daemon-reload` (which
//! package installs run) puts back the values the unit holds. A limit written only to the
//! cgroup file is therefore undone behind the agent's back (seen on a real systemd 252 in the
//! VM of tests/vm). As kubelet's libcontainer does in `Set` (unit properties first, then the
//! files), each pod write sets the matching runtime properties through systemd's D-Bus API
//! before the file is written (docs/kubelet-resize.md, "The systemd cgroup driver").

use std::time::Duration;

use zbus::zvariant::Value;

use super::cgroup::{CgroupVersion, PodCpu, shares_to_weight, weight_to_shares};

#[derive(Debug, thiserror::Error)]
pub(crate) enum SliceUnitError {
    #[error("connecting to the system D-Bus to reach systemd: {0}")]
    Connect(#[source] Box<zbus::Error>),
    #[error("systemd refused to set {properties} on {unit}: {source}")]
    Set {
        unit: String,
        properties: String,
        #[source]
        source: Box<zbus::Error>,
    },
    #[error("systemd did not answer within {0:?} when setting {1} on {2}")]
    Timeout(Duration, String, String),
}

impl SliceUnitError {
    /// The bus or systemd did not answer (restarting, say): worth trying again later. A refusal
    /// (unknown unit, property or permission) is not.
    pub(crate) fn is_transient(&self) -> bool {
        !matches!(self, SliceUnitError::Set { .. })
    }
}

/// systemd's "no limit" (USEC_INFINITY, CGROUP_LIMIT_MAX) for the u64 properties below.
const INFINITY: u64 = u64::MAX;

/// systemd answers in milliseconds; a hung bus must not hold a resize forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The unit of a pod cgroup parent the systemd driver named (`/a.slice/a-b.slice` or
/// `a-b.slice` → `a-b.slice`); None for cgroupfs parents.
pub(crate) fn unit_of_parent(parent: &str) -> Option<&str> {
    super::cgroup::pod_slice(parent).filter(|slice| *slice != ".slice")
}

/// The unit properties that carry one cpu setting of the pod cgroup, as libcontainer converts
/// them: v2 CPUWeight (runc's weight for shares), v1 CPUShares; the quota as
/// CPUQuotaPeriodUSec and CPUQuotaPerSecUSec rounded up to whole 10 ms per second (systemd keeps
/// whole percents of a CPU; the file written after it holds the exact quota).
pub(crate) fn cpu_properties(version: CgroupVersion, setting: PodCpu) -> Vec<(&'static str, u64)> {
    match (version, setting) {
        (CgroupVersion::V2, PodCpu::Shares(shares)) => {
            vec![("CPUWeight", shares_to_weight(shares))]
        }
        (CgroupVersion::V2, PodCpu::Weight(weight)) => vec![("CPUWeight", weight)],
        (CgroupVersion::V1, PodCpu::Shares(shares)) => vec![("CPUShares", shares)],
        (CgroupVersion::V1, PodCpu::Weight(weight)) => {
            vec![("CPUShares", weight_to_shares(weight))]
        }
        (_, PodCpu::Quota { quota, period }) => {
            let per_second = match quota {
                Some(quota) if quota > 0 && period > 0 => {
                    (quota as u64 * 1_000_000 / period).div_ceil(10_000) * 10_000
                }
                _ => INFINITY,
            };
            vec![
                ("CPUQuotaPeriodUSec", period),
                ("CPUQuotaPerSecUSec", per_second),
            ]
        }
    }
}

/// The unit property that carries the pod cgroup's memory limit (None: unlimited).
pub(crate) fn memory_properties(
    version: CgroupVersion,
    limit: Option<i64>,
) -> Vec<(&'static str, u64)> {
    let bytes = limit.map_or(INFINITY, |b| b.max(0) as u64);
    match version {
        CgroupVersion::V2 => vec![("MemoryMax", bytes)],
        CgroupVersion::V1 => vec![("MemoryLimit", bytes)],
    }
}

/// Sets runtime properties of `unit` (SetUnitProperties with runtime=true: kept until reboot,
/// as kubelet's are) on the system bus, as root.
pub(crate) async fn set(
    unit: &str,
    properties: &[(&'static str, u64)],
) -> Result<(), SliceUnitError> {
    static CONNECTION: tokio::sync::OnceCell<zbus::Connection> = tokio::sync::OnceCell::const_new();
    let described = || {
        properties
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let call = async {
        // A failed connection is not kept: the next write tries again.
        let connection = CONNECTION
            .get_or_try_init(zbus::Connection::system)
            .await
            .map_err(|e| SliceUnitError::Connect(Box::new(e)))?;
        let values: Vec<(&str, Value<'_>)> = properties
            .iter()
            .map(|&(name, value)| (name, Value::U64(value)))
            .collect();
        connection
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "SetUnitProperties",
                &(unit, true, values),
            )
            .await
            .map_err(|source| SliceUnitError::Set {
                unit: unit.to_owned(),
                properties: described(),
                source: Box::new(source),
            })?;
        Ok(())
    };
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(SliceUnitError::Timeout(
                CALL_TIMEOUT,
                described(),
                unit.to_owned(),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_parents() {
        let expanded = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice";
        assert_eq!(
            unit_of_parent(expanded),
            Some("kubepods-burstable-pod1_2.slice")
        );
        assert_eq!(
            unit_of_parent("kubepods-pod1_2.slice/"),
            Some("kubepods-pod1_2.slice")
        );
        assert_eq!(unit_of_parent("/kubepods/burstable/pod1-2"), None);
        assert_eq!(unit_of_parent(".slice"), None);
        assert_eq!(unit_of_parent(""), None);
    }

    /// The figures libcontainer sends for the same values (runc's weight for 204 shares is 8;
    /// 30.5 ms of 100 ms is 305 ms per second, rounded up to 310).
    #[test]
    fn cpu_as_libcontainer_sends_it() {
        use CgroupVersion::{V1, V2};
        assert_eq!(cpu_properties(V2, PodCpu::Shares(204)), [("CPUWeight", 8)]);
        assert_eq!(cpu_properties(V2, PodCpu::Weight(39)), [("CPUWeight", 39)]);
        assert_eq!(
            cpu_properties(V1, PodCpu::Shares(204)),
            [("CPUShares", 204)]
        );
        assert_eq!(cpu_properties(V1, PodCpu::Weight(4)), [("CPUShares", 80)]);
        let quota = |quota, period| PodCpu::Quota { quota, period };
        assert_eq!(
            cpu_properties(V2, quota(Some(70_000), 100_000)),
            [
                ("CPUQuotaPeriodUSec", 100_000),
                ("CPUQuotaPerSecUSec", 700_000)
            ]
        );
        assert_eq!(
            cpu_properties(V1, quota(Some(30_500), 100_000)),
            [
                ("CPUQuotaPeriodUSec", 100_000),
                ("CPUQuotaPerSecUSec", 310_000)
            ]
        );
        assert_eq!(
            cpu_properties(V2, quota(None, 100_000)),
            [
                ("CPUQuotaPeriodUSec", 100_000),
                ("CPUQuotaPerSecUSec", u64::MAX)
            ]
        );
    }

    #[test]
    fn memory_as_libcontainer_sends_it() {
        assert_eq!(
            memory_properties(CgroupVersion::V2, Some(96 << 20)),
            [("MemoryMax", 100_663_296)]
        );
        assert_eq!(
            memory_properties(CgroupVersion::V2, None),
            [("MemoryMax", u64::MAX)]
        );
        assert_eq!(
            memory_properties(CgroupVersion::V1, Some(4096)),
            [("MemoryLimit", 4096)]
        );
    }
}
