//! `kubernetes.io/aws-ebs` ↔ `ebs.csi.aws.com`.
//!
//! The in-tree volume ID may be `aws://<zone>/<vol-id>`, `aws:///<vol-id>` or the bare EBS ID;
//! the CSI handle is the bare ID. The partition travels as volume attribute `partition`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, PersistentVolume,
};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{
    Plugin, TranslationError, omit_empty, omit_false, parse_partition, pv_name, set_parameters,
    spec_mut, topology,
};
use crate::names::{LEGACY_FSTYPE, PARAM_FSTYPE};

/// The driver's zone key.
pub(super) const TOPOLOGY_KEY: &str = "topology.ebs.csi.aws.com/zone";
/// IOPS per GiB, kept; the driver is then allowed to raise IOPS to AWS's minimum, as the in-tree
/// plugin did.
const IOPS_PER_GB: &str = "iopspergb";
const ALLOW_IOPS_INCREASE: &str = "allowautoiopspergbincrease";

/// `fstype` → `csi.storage.k8s.io/fstype`; `zone`/`zones` → allowed topology on the driver's
/// key; `iopsPerGB` adds `allowautoiopspergbincrease=true`; other parameters pass unchanged.
pub(super) fn class_to_csi(class: &mut StorageClass) -> Result<(), TranslationError> {
    let (params, legacy) =
        topology::split_parameters(class, |lower, key, value, params| match lower {
            LEGACY_FSTYPE => {
                params.insert(PARAM_FSTYPE.to_string(), value.to_string());
            }
            IOPS_PER_GB => {
                params.insert(ALLOW_IOPS_INCREASE.to_string(), "true".to_string());
                params.insert(key.to_string(), value.to_string());
            }
            _ => {
                params.insert(key.to_string(), value.to_string());
            }
        });
    topology::class_topology(class, legacy, TOPOLOGY_KEY)?;
    set_parameters(class, params);
    Ok(())
}

/// The in-tree source from `spec.csi`: the handle is the volume ID as is.
pub(super) fn csi_to_in_tree(
    pv: &mut PersistentVolume,
    csi: CSIPersistentVolumeSource,
) -> Result<(), TranslationError> {
    let partition = match csi
        .volume_attributes
        .as_ref()
        .and_then(|a| a.get("partition"))
    {
        Some(p) => parse_partition(pv, p)?,
        None => None,
    };
    topology::csi_to_in_tree(pv, TOPOLOGY_KEY);
    topology::add_regions(pv, region_of)?;
    spec_mut(pv).aws_elastic_block_store = Some(AWSElasticBlockStoreVolumeSource {
        volume_id: csi.volume_handle,
        fs_type: omit_empty(csi.fs_type),
        read_only: omit_false(csi.read_only),
        partition,
    });
    Ok(())
}

/// `spec.csi` from the in-tree source, which is removed.
pub(super) fn in_tree_to_csi(
    pv: &mut PersistentVolume,
) -> Result<CSIPersistentVolumeSource, TranslationError> {
    let source = spec_mut(pv)
        .aws_elastic_block_store
        .take()
        .unwrap_or_default();
    let handle =
        ebs_volume_id(&source.volume_id).map_err(|reason| TranslationError::Malformed {
            pv: pv_name(pv),
            field: "spec.awsElasticBlockStore.volumeID",
            value: source.volume_id.clone(),
            reason,
        })?;
    topology::in_tree_to_csi(pv, TOPOLOGY_KEY);
    let partition = source.partition.unwrap_or(0).to_string();
    Ok(CSIPersistentVolumeSource {
        driver: Plugin::AwsEbs.driver().to_string(),
        volume_handle: handle,
        read_only: omit_false(source.read_only),
        fs_type: omit_empty(source.fs_type),
        volume_attributes: Some(BTreeMap::from([("partition".to_string(), partition)])),
        ..CSIPersistentVolumeSource::default()
    })
}

/// The EBS volume ID in a Kubernetes volume ID: anything not starting with `aws://` is taken as
/// is; otherwise the URL path, without its slashes, must be `vol-` followed by no `/`.
///
/// Differs from upstream: the URL's host part (the zone) is not validated the way Go's URL
/// parser does (upstream rejects, for example, a space or a non-numeric port there); control
/// characters and bad `%` escapes are rejected as upstream does.
pub(super) fn ebs_volume_id(kubernetes_id: &str) -> Result<String, String> {
    let Some(rest) = kubernetes_id.strip_prefix("aws://") else {
        return Ok(kubernetes_id.to_string());
    };
    if kubernetes_id.chars().any(|c| c.is_ascii_control()) {
        return Err("invalid control character in URL".into());
    }
    // Fragment and query end the path; the authority (the zone) ends at the first '/'.
    let rest = rest.split(['#', '?']).next().unwrap_or_default();
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let path = percent_decode(path)?;
    let id = path.trim_matches('/');
    if id.starts_with("vol-") && !id.contains('/') {
        Ok(id.to_string())
    } else {
        Err("want vol-<id>, aws://<zone>/vol-<id> or aws:///vol-<id>".into())
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("invalid URL escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "URL escapes do not decode to UTF-8".to_string())
}

/// The AWS region of one term's zones, which must all be in one region. Zones look like
/// `us-west-2a`, `us-gov-east-1a` (region: drop the zone letter), `us-west-2-lax-1a` (local
/// zone) or `us-east-1-wl1-bos-wlz-1` (wavelength; region: the first three parts).
pub(super) fn region_of(zones: &[String]) -> Result<String, String> {
    if zones.is_empty() {
        return Err("no zones specified".into());
    }
    let mut regions = BTreeSet::new();
    for zone in zones {
        let parts: Vec<&str> = zone.split('-').collect();
        let last = parts[parts.len() - 1];
        let region = match parts.len() {
            // A two-character last part that is not two ASCII-compatible bytes cannot be a
            // digit and a letter; upstream would cut it mid-character, we refuse it.
            3 | 4 if last.len() == 2 && last.is_char_boundary(1) => {
                format!("{}-{}", parts[..parts.len() - 1].join("-"), &last[..1])
            }
            5 | 7 => parts[..3].join("-"),
            _ => return Err(format!("{zone:?} is not a valid AWS zone")),
        };
        regions.insert(region);
    }
    match regions.len() {
        1 => Ok(regions.pop_first().unwrap_or_default()),
        _ => Err(format!("they span the regions {regions:?}")),
    }
}
