//! The values of the metrics' labels that name an outcome or a cause: one enum each, so that a
//! value is spelled once, and every series can be created at zero when the agent starts. The
//! spellings are the exported ones (dashboards and alerts use them) and do not change.

use serde::{Deserialize, Serialize};

macro_rules! label_values {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, for the series made at start (not every label needs it).
            #[allow(dead_code)]
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

label_values! {
    /// What killed the old container of a restart (`trigger`).
    Trigger {
        Crr => "crr",
        RestartRequest => "restart-request",
        EnvChange => "env-change",
        KubeletUpdate => "kubelet-update",
        ContainerExit => "container-exit",
    }
}

// As the node view shows a restart (`inplaced pods -o json`): the label's spelling.
impl Serialize for Trigger {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Trigger {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Trigger::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown restart trigger {text:?}")))
    }
}

label_values! {
    /// A phase of an in-place restart (`inplaced_restart_duration_seconds{phase}`).
    RestartPhase {
        Stop => "stop",
        Restart => "restart",
        // The part of `restart` the kubelet spent in its crash back-off (predicted).
        Backoff => "backoff",
        Ready => "ready",
        Total => "total",
    }
}

label_values! {
    /// How an in-place restart ended (`inplaced_restarts_total{result}`).
    RestartResult {
        Ready => "ready",
        NotReady => "not-ready",
    }
}

label_values! {
    /// How an env-from-metadata restart ended (`inplaced_env_restarts_total{result}`).
    EnvRestartResult {
        Success => "success",
        Error => "error",
        Unmatched => "unmatched",
        NotRestartable => "not_restartable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reads_back_as_written_and_an_unknown_one_is_refused() {
        for trigger in Trigger::ALL {
            let text = serde_json::to_string(trigger).unwrap();
            assert_eq!(text, format!("\"{}\"", trigger.as_str()));
            assert_eq!(serde_json::from_str::<Trigger>(&text).unwrap(), *trigger);
        }
        assert!(serde_json::from_str::<Trigger>("\"cron\"").is_err());
    }
}
