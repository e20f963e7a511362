//! What the claim controller takes from the command line, as plain values read once at start
//! (as `CapacityConfig` is for the capacity controller): the controller never sees the whole
//! options struct.

use std::time::Duration;

use provisioning::prepare::ProvisionerConfig;

/// The flags the claim controller reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimsConfig {
    /// `--retry-interval-start` and `--retry-interval-max`.
    pub retry_interval_start: Duration,
    pub retry_interval_max: Duration,
    /// `--volume-name-prefix` and `--volume-name-uuid-length` (-1: the whole UID).
    pub volume_name_prefix: String,
    pub volume_name_uuid_length: i32,
    /// `--default-fstype` (empty: none).
    pub default_fs_type: String,
    pub extra_create_metadata: bool,
    /// The `CrossNamespaceVolumeDataSource` feature gate.
    pub cross_namespace_data_sources: bool,
    /// The `Topology` feature gate (GA): topology requirements when the driver asks for them.
    pub topology: bool,
    pub strict_topology: bool,
    pub immediate_topology: bool,
    pub controller_publish_read_only: bool,
    pub prevent_volume_mode_conversion: bool,
    /// `--capacity-pod-aware` (ours).
    pub capacity_pod_aware: bool,
}

impl ClaimsConfig {
    pub fn from_options(opts: &cli::Options) -> ClaimsConfig {
        ClaimsConfig {
            retry_interval_start: opts.retry_interval_start,
            retry_interval_max: opts.retry_interval_max,
            volume_name_prefix: opts.volume_name_prefix.clone(),
            volume_name_uuid_length: opts.volume_name_uuid_length.map_or(-1, |l| l as i32),
            default_fs_type: opts.default_fstype.clone().unwrap_or_default(),
            extra_create_metadata: opts.extra_create_metadata,
            cross_namespace_data_sources: opts
                .feature_gates
                .enabled(cli::Feature::CrossNamespaceVolumeDataSource),
            topology: opts.feature_gates.enabled(cli::Feature::Topology),
            strict_topology: opts.strict_topology,
            immediate_topology: opts.immediate_topology,
            controller_publish_read_only: opts.controller_publish_readonly,
            prevent_volume_mode_conversion: opts.prevent_volume_mode_conversion,
            capacity_pod_aware: opts.capacity_pod_aware,
        }
    }

    /// The pure builders' view, for our driver and the VolumeAttributesClass gate as
    /// discovered at start.
    pub(super) fn provisioner<'a>(
        &'a self,
        driver_name: &'a str,
        volume_attributes_class_enabled: bool,
    ) -> ProvisionerConfig<'a> {
        ProvisionerConfig {
            driver_name,
            volume_name_prefix: &self.volume_name_prefix,
            volume_name_uuid_length: self.volume_name_uuid_length,
            default_fs_type: &self.default_fs_type,
            extra_create_metadata: self.extra_create_metadata,
            volume_attributes_class_enabled,
            cross_namespace_data_sources: self.cross_namespace_data_sources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_from_upstreams_defaults() {
        let c = ClaimsConfig::from_options(&cli::Options::default());
        assert_eq!(c.volume_name_prefix, "pvc");
        assert_eq!(c.volume_name_uuid_length, -1, "the whole UID by default");
        assert_eq!(c.retry_interval_start, Duration::from_secs(1));
        assert_eq!(c.retry_interval_max, Duration::from_secs(300));
        assert!(c.topology && c.immediate_topology && c.prevent_volume_mode_conversion);
        assert!(!c.strict_topology && !c.capacity_pod_aware && !c.extra_create_metadata);
    }

    #[test]
    fn a_uuid_length_is_kept() {
        let mut opts = cli::Options::default();
        opts.volume_name_uuid_length = Some(8);
        opts.default_fstype = Some("xfs".into());
        let c = ClaimsConfig::from_options(&opts);
        assert_eq!(
            (c.volume_name_uuid_length, c.default_fs_type.as_str()),
            (8, "xfs")
        );
    }
}
