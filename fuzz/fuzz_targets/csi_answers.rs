//! What the driver answers: CreateVolume's size, topology and content source, and GetCapacity's
//! readings.
//!
//! Properties: a kept volume's PV capacity is never below the request nor negative; a size the
//! driver does not know (0) becomes the request; the PV node affinity has one term per
//! non-empty accessible topology, each with exactly that topology's pairs; a claim with a data
//! source never keeps a volume without content; a GetCapacity reading is published clamped at
//! zero, unchanged otherwise. (The empty-volume-id check lives in the claim controller's shell.)
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use capacity::Capacity;
use csi::v1::{Topology, Volume, VolumeContentSource};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, TypedLocalObjectReference,
};
use libfuzzer_sys::fuzz_target;
use provisioning::pv::{CapacityDecision, capacity_decision, missing_content_source};
use provisioning::topology::volume_node_affinity;

#[derive(Arbitrary, Debug)]
struct Input {
    requested: i64,
    reported: i64,
    topology: Vec<BTreeMap<String, String>>,
    data_source: bool,
    content: bool,
    available: i64,
    maximum: Option<i64>,
}

fuzz_target!(|input: Input| {
    // Requests come from parse_quantity, which never yields a negative size.
    let requested = input.requested.max(0);
    let decision = capacity_decision(requested, input.reported);
    match decision.bytes(requested) {
        Some(bytes) => {
            assert!(
                bytes >= requested && bytes >= 0,
                "{decision:?} keeps {bytes}"
            );
            if input.reported == 0 {
                assert_eq!(decision, CapacityDecision::UseRequested);
            }
        }
        None => assert!(input.reported < requested && input.reported != 0),
    }

    let accessible: Vec<Topology> = input
        .topology
        .iter()
        .map(|s| Topology {
            segments: s.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        })
        .collect();
    let want: Vec<BTreeSet<(String, String)>> = input
        .topology
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .collect();
    match volume_node_affinity(&accessible) {
        None => assert!(want.is_empty()),
        Some(affinity) => {
            let terms = affinity
                .required
                .expect("required terms")
                .node_selector_terms;
            let got: Vec<BTreeSet<(String, String)>> = terms
                .iter()
                .map(|t| {
                    assert!(t.match_fields.is_none());
                    t.match_expressions
                        .iter()
                        .flatten()
                        .map(|e| {
                            assert_eq!(e.operator, "In");
                            let values = e.values.clone().unwrap_or_default();
                            assert_eq!(values.len(), 1);
                            (e.key.clone(), values[0].clone())
                        })
                        .collect()
                })
                .collect();
            assert_eq!(got, want);
        }
    }

    let claim = PersistentVolumeClaim {
        spec: Some(PersistentVolumeClaimSpec {
            data_source: input.data_source.then(|| TypedLocalObjectReference {
                kind: "VolumeSnapshot".into(),
                name: "snap".into(),
                api_group: Some("snapshot.storage.k8s.io".into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let volume = Volume {
        volume_id: "vol".into(),
        content_source: input.content.then(VolumeContentSource::default),
        ..Default::default()
    };
    assert_eq!(
        missing_content_source(&claim, &volume, false),
        input.data_source && !input.content
    );

    let published = Capacity::from_response(input.available, input.maximum);
    assert_eq!(published.available, input.available.max(0));
    assert_eq!(
        published.maximum_volume_size,
        input.maximum.map(|m| m.max(0))
    );
    assert!(published.limit() >= 0);
});
