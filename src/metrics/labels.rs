//! Label values that name an outcome or a cause: one enum each (declared by the module that
//! owns the metric, with [`label_values!`]), so that a value is spelled once and every series
//! can be created at zero when the agent starts. The spellings are the exported ones
//! (dashboards and alerts use them) and do not change.

/// `label_values! { /// doc  Name { Variant => "spelling", ... } }`: the enum, `ALL` and `as_str`.
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
pub(crate) use label_values;
