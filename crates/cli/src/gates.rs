//! `--feature-gates`: upstream's four gates with component-base's rules.
//!
//! - The flag value is `Name=bool,...`; the flag may repeat and later values win (pflag's
//!   `MapStringBool`). Booleans use Go's `ParseBool`.
//! - An unknown name is an error. A gate locked to its default cannot be changed (none of
//!   upstream's gates is locked). Setting a GA gate works but earns a warning that it will be
//!   removed.
//! - `AllAlpha` / `AllBeta` set every alpha / beta gate that is not named explicitly.
//!
//! Upstream's global gate also knows the alpha and beta gates of the Kubernetes libraries it
//! links (`k8s.io/apiserver`, component-base metrics, zpages; [`LIBRARY_GATES`]). None of them
//! changes what the sidecar does; they are taken and ignored, so a command line upstream
//! starts with starts here too.

use std::collections::{BTreeMap, BTreeSet};

use crate::goparse::parse_go_bool;

/// Maturity of a gate, as component-base prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
}

/// The gates upstream external-provisioner v6.3.0 registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// GA, on: topology-aware provisioning.
    Topology,
    /// Alpha, off: data sources in other namespaces (needs ReferenceGrants).
    CrossNamespaceVolumeDataSource,
    /// GA, on: VolumeAttributesClass parameters in CreateVolume. Upstream turns it off at
    /// start-up when it was not set explicitly and the API server lacks the v1 API.
    VolumeAttributesClass,
    /// Alpha, off: drain the controllers and release the Lease on SIGTERM/SIGINT.
    ReleaseLeaderElectionOnExit,
}

/// The library gates upstream v6.3.0's `--help` lists besides its own (all alpha or beta,
/// none locked).
pub const LIBRARY_GATES: [&str; 29] = [
    "APIResponseCompression",
    "APIServerIdentity",
    "APIServingWithRoutine",
    "AllowParsingUserUIDFromCertAuth",
    "AllowUnsafeMalformedObjectDeletion",
    "CBORServingAndStorage",
    "ComponentFlagz",
    "ComponentStatusz",
    "ConcurrentWatchObjectDecode",
    "ConstrainedImpersonation",
    "CoordinatedLeaderElection",
    "DeclarativeValidationBeta",
    "DetectCacheInconsistency",
    "ListFromCacheSnapshot",
    "ManifestBasedAdmissionControlConfig",
    "NativeHistograms",
    "OpenAPIEnums",
    "RemoteRequestHeaderUID",
    "ShardedListAndWatch",
    "SizeBasedListCostEstimate",
    "StorageVersionAPI",
    "StorageVersionHash",
    "StructuredAuthenticationConfigurationEgressSelector",
    "StructuredAuthenticationConfigurationJWKSMetrics",
    "TokenRequestServiceAccountUIDValidation",
    "UnauthenticatedHTTP2DOSMitigation",
    "UnknownVersionInteroperabilityProxy",
    "WatchCacheInitializationPostStartHook",
    "WatchList",
];

struct Spec {
    feature: Feature,
    name: &'static str,
    default: bool,
    stage: Stage,
    locked: bool,
}

const SPECS: [Spec; 4] = [
    Spec {
        feature: Feature::Topology,
        name: "Topology",
        default: true,
        stage: Stage::Ga,
        locked: false,
    },
    Spec {
        feature: Feature::CrossNamespaceVolumeDataSource,
        name: "CrossNamespaceVolumeDataSource",
        default: false,
        stage: Stage::Alpha,
        locked: false,
    },
    Spec {
        feature: Feature::VolumeAttributesClass,
        name: "VolumeAttributesClass",
        default: true,
        stage: Stage::Ga,
        locked: false,
    },
    Spec {
        feature: Feature::ReleaseLeaderElectionOnExit,
        name: "ReleaseLeaderElectionOnExit",
        default: false,
        stage: Stage::Alpha,
        locked: false,
    },
];

const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

impl Feature {
    pub const ALL: [Feature; 4] = [
        Feature::Topology,
        Feature::CrossNamespaceVolumeDataSource,
        Feature::VolumeAttributesClass,
        Feature::ReleaseLeaderElectionOnExit,
    ];

    fn spec(self) -> &'static Spec {
        // SPECS lists every variant.
        SPECS
            .iter()
            .find(|s| s.feature == self)
            .unwrap_or(&SPECS[0])
    }

    /// The gate's name on the command line.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn default_enabled(self) -> bool {
        self.spec().default
    }

    pub fn stage(self) -> Stage {
        self.spec().stage
    }
}

/// What went wrong with `--feature-gates`; the text is component-base's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateError {
    Malformed(String),
    BadBool {
        name: String,
        value: String,
    },
    Unknown(String),
    Locked {
        name: String,
        value: bool,
        locked_to: bool,
    },
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(item) => write!(f, "malformed pair {item:?}, expect string=bool"),
            Self::BadBool { name, value } => write!(f, "invalid value of {name}: {value}"),
            Self::Unknown(name) => write!(f, "unrecognized feature gate: {name}"),
            Self::Locked {
                name,
                value,
                locked_to,
            } => {
                write!(
                    f,
                    "cannot set feature gate {name} to {value}, feature is locked to {locked_to}"
                )
            }
        }
    }
}

/// Merges the values of every `--feature-gates` occurrence into one map, as `MapStringBool`
/// does: comma-separated `key=bool` pairs, keys and values trimmed, empty items skipped.
pub fn parse_gate_map<S: AsRef<str>>(values: &[S]) -> Result<BTreeMap<String, bool>, GateError> {
    let mut map = BTreeMap::new();
    for value in values {
        for item in value.as_ref().split(',').filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| GateError::Malformed(item.to_string()))?;
            let (k, v) = (k.trim(), v.trim());
            let b = parse_go_bool(v).ok_or_else(|| GateError::BadBool {
                name: k.to_string(),
                value: v.to_string(),
            })?;
            map.insert(k.to_string(), b);
        }
    }
    Ok(map)
}

/// The effective feature gates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates {
    enabled: BTreeMap<Feature, bool>,
    explicit: BTreeSet<Feature>,
}

impl FeatureGates {
    /// Applies a merged flag map like component-base's `SetFromMap`. Returns the warnings to
    /// log (one per GA gate that was set).
    pub fn set_from_map(&mut self, map: &BTreeMap<String, bool>) -> Result<Vec<String>, GateError> {
        let mut enabled = self.enabled.clone();
        let mut explicit = self.explicit.clone();
        let mut warnings = Vec::new();
        let mut all = Vec::new();
        for (name, &value) in map {
            if name == ALL_ALPHA || name == ALL_BETA {
                all.push((name.as_str(), value));
                continue;
            }
            if LIBRARY_GATES.contains(&name.as_str()) {
                continue;
            }
            let spec = SPECS
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| GateError::Unknown(name.clone()))?;
            if spec.locked && spec.default != value {
                return Err(GateError::Locked {
                    name: name.clone(),
                    value,
                    locked_to: spec.default,
                });
            }
            enabled.insert(spec.feature, value);
            explicit.insert(spec.feature);
            if spec.stage == Stage::Ga {
                warnings.push(format!(
                    "Setting GA feature gate {name}={value}. It will be removed in a future release."
                ));
            }
        }
        // Named gates win over AllAlpha/AllBeta whatever the order.
        for (name, value) in all {
            let stage = if name == ALL_ALPHA {
                Stage::Alpha
            } else {
                Stage::Beta
            };
            for spec in SPECS.iter().filter(|s| s.stage == stage && !s.locked) {
                if !explicit.contains(&spec.feature) {
                    enabled.insert(spec.feature, value);
                }
            }
        }
        self.enabled = enabled;
        self.explicit = explicit;
        Ok(warnings)
    }

    /// Whether `feature` is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        self.enabled
            .get(&feature)
            .copied()
            .unwrap_or(feature.default_enabled())
    }

    /// Whether `feature` was named on the command line (upstream's `ExplicitlySet`).
    pub fn explicitly_set(&self, feature: Feature) -> bool {
        self.explicit.contains(&feature)
    }

    /// Turns a gate off after start-up discovery, as upstream does for VolumeAttributesClass
    /// when the v1 API is missing and the gate was not set explicitly.
    pub fn disable(&mut self, feature: Feature) {
        self.enabled.insert(feature, false);
    }

    /// The lines upstream lists under `--feature-gates` in its help (GA gates are not listed).
    pub fn help_lines() -> Vec<String> {
        let mut lines = vec![
            format!("{ALL_ALPHA}=true|false (ALPHA - default=false)"),
            format!("{ALL_BETA}=true|false (BETA - default=false)"),
        ];
        for spec in SPECS.iter().filter(|s| s.stage != Stage::Ga) {
            let stage = if spec.stage == Stage::Alpha {
                "ALPHA"
            } else {
                "BETA"
            };
            lines.push(format!(
                "{}=true|false ({stage} - default={})",
                spec.name, spec.default
            ));
        }
        lines.sort();
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn gates(values: &[&str]) -> Result<(FeatureGates, Vec<String>), GateError> {
        let map = parse_gate_map(values)?;
        let mut g = FeatureGates::default();
        let warnings = g.set_from_map(&map)?;
        Ok((g, warnings))
    }

    #[test]
    fn library_gates_are_taken_and_change_nothing() {
        let (g, warnings) = gates(&["WatchList=false,APIResponseCompression=true"]).unwrap();
        assert_eq!(g, FeatureGates::default());
        assert!(warnings.is_empty());
        assert!(matches!(
            gates(&["ContextualLogging=true"]),
            Err(GateError::Unknown(name)) if name == "ContextualLogging"
        ));
        assert!(
            gates(&["WatchList=maybe"]).is_err(),
            "a bad value is still refused"
        );
    }

    #[test]
    fn defaults() {
        let g = FeatureGates::default();
        assert!(g.enabled(Feature::Topology));
        assert!(!g.enabled(Feature::CrossNamespaceVolumeDataSource));
        assert!(g.enabled(Feature::VolumeAttributesClass));
        assert!(!g.enabled(Feature::ReleaseLeaderElectionOnExit));
        assert!(Feature::ALL.iter().all(|f| !g.explicitly_set(*f)));
    }

    #[rstest]
    #[case(&["CrossNamespaceVolumeDataSource=true"], Feature::CrossNamespaceVolumeDataSource, true)]
    #[case(&["Topology=false"], Feature::Topology, false)]
    #[case(&["VolumeAttributesClass=f"], Feature::VolumeAttributesClass, false)]
    #[case(&["ReleaseLeaderElectionOnExit=1"], Feature::ReleaseLeaderElectionOnExit, true)]
    #[case(&["Topology=false", "Topology=true"], Feature::Topology, true)]
    #[case(&[" Topology = False ,"], Feature::Topology, false)]
    #[case(&["AllAlpha=true"], Feature::CrossNamespaceVolumeDataSource, true)]
    #[case(&["AllAlpha=true"], Feature::ReleaseLeaderElectionOnExit, true)]
    #[case(&["AllAlpha=true,CrossNamespaceVolumeDataSource=false"], Feature::CrossNamespaceVolumeDataSource, false)]
    #[case(&["CrossNamespaceVolumeDataSource=false", "AllAlpha=true"], Feature::CrossNamespaceVolumeDataSource, false)]
    #[case(&["AllAlpha=true"], Feature::Topology, true)]
    #[case(&["AllBeta=false"], Feature::Topology, true)]
    #[case(&[""], Feature::Topology, true)]
    fn applies(#[case] values: &[&str], #[case] feature: Feature, #[case] want: bool) {
        let (g, _) = gates(values).unwrap();
        assert_eq!(g.enabled(feature), want);
    }

    #[rstest]
    #[case(&["Bogus=true"], "unrecognized feature gate: Bogus")]
    #[case(&["topology=true"], "unrecognized feature gate: topology")]
    #[case(&["Topology"], r#"malformed pair "Topology", expect string=bool"#)]
    #[case(&["Topology=yes"], "invalid value of Topology: yes")]
    #[case(&["Topology=true", "X=1"], "unrecognized feature gate: X")]
    fn rejects(#[case] values: &[&str], #[case] message: &str) {
        assert_eq!(gates(values).unwrap_err().to_string(), message);
    }

    #[test]
    fn ga_gates_warn_and_count_as_explicit() {
        let (g, warnings) = gates(&["VolumeAttributesClass=false,AllAlpha=true"]).unwrap();
        assert_eq!(
            warnings,
            [
                "Setting GA feature gate VolumeAttributesClass=false. It will be removed in a future release."
            ]
        );
        assert!(g.explicitly_set(Feature::VolumeAttributesClass));
        assert!(!g.explicitly_set(Feature::CrossNamespaceVolumeDataSource));
    }

    #[test]
    fn help_lists_settable_gates() {
        assert_eq!(
            FeatureGates::help_lines(),
            [
                "AllAlpha=true|false (ALPHA - default=false)",
                "AllBeta=true|false (BETA - default=false)",
                "CrossNamespaceVolumeDataSource=true|false (ALPHA - default=false)",
                "ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false)",
            ]
        );
    }

    #[test]
    fn disable_after_discovery() {
        let mut g = FeatureGates::default();
        g.disable(Feature::VolumeAttributesClass);
        assert!(!g.enabled(Feature::VolumeAttributesClass));
    }

    proptest::proptest! {
        /// Any flag value parses or is refused with a one-line error, never a panic; a
        /// refused value leaves the gates untouched.
        #[test]
        fn arbitrary_values_never_panic(values in proptest::collection::vec("\\PC{0,30}", 0..4)) {
            match gates(&values.iter().map(String::as_str).collect::<Vec<_>>()) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(!e.to_string().contains('\n'), "{e}"),
            }
        }

        /// Known gates set to any spelling Go's ParseBool accepts take that value, with
        /// spaces around keys and values and empty items ignored.
        #[test]
        fn known_gates_take_the_value_given(
            value in proptest::bool::ANY,
            spelling in 0usize..3,
            pad in "[ ]{0,2}",
        ) {
            let word = match (value, spelling) {
                (true, 0) => "true", (true, 1) => "1", (true, _) => "TRUE",
                (false, 0) => "false", (false, 1) => "0", (false, _) => "False",
            };
            let flag = format!(",{pad}CrossNamespaceVolumeDataSource{pad}={pad}{word}{pad},");
            let (g, _) = gates(&[flag.as_str()]).expect("a well-formed gate");
            proptest::prop_assert_eq!(g.enabled(Feature::CrossNamespaceVolumeDataSource), value);
            proptest::prop_assert!(g.explicitly_set(Feature::CrossNamespaceVolumeDataSource));
        }
    }
}
