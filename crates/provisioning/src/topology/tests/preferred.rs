//! Preferred-term tests: selected node, StatefulSet spreading, the README table.

use super::*;
use pretty_assertions::assert_eq;

// TestPreferredTopologies: node 0 is selected; (preferred, strict preferred) or an error.
#[test]
fn preferred_with_selected_node() {
    let ar = |z: &str, r: &str| term(&[(ZONE, z), (RACK, r)]);
    let zr_keys: &[&[&str]] = &[&[ZONE, RACK], &[ZONE, RACK], &[ZONE, RACK]];
    let zr_labels: &[&[(&str, &str)]] = &[
        &[(ZONE, "zone2"), (RACK, "rackA")],
        &[(ZONE, "zone1"), (RACK, "rackA")],
        &[(ZONE, "zone1"), (RACK, "rackB")],
    ];
    let zone_rack_allowed = allowed(&[&[(ZONE, &["zone1", "zone2"]), (RACK, &["rackA", "rackB"])]]);
    type Case = (
        &'static str,
        Vec<TopologySelectorTerm>,
        Cluster,
        Requirement,
    );
    let cases: Vec<Case> = vec![
        (
            "allowedTopologies specified",
            zone_rack_allowed.clone(),
            Cluster::new(zr_labels, zr_keys),
            Some((
                vec![
                    ar("zone2", "rackA"),
                    ar("zone1", "rackB"),
                    ar("zone2", "rackB"),
                    ar("zone1", "rackA"),
                ],
                vec![ar("zone2", "rackA")],
            )),
        ),
        (
            "allowedTopologies specified: no CSINode",
            zone_rack_allowed.clone(),
            Cluster::new(zr_labels, &[]),
            None,
        ),
        (
            "allowedTopologies specified: mismatched key",
            zone_rack_allowed,
            Cluster::new(
                zr_labels,
                &[
                    &["com.example.csi/foo", RACK],
                    &["com.example.csi/foo", RACK],
                    &["com.example.csi/foo", RACK],
                ],
            ),
            None,
        ),
        (
            "topology aggregation",
            vec![],
            Cluster::new(zr_labels, zr_keys),
            Some((
                vec![
                    ar("zone2", "rackA"),
                    ar("zone1", "rackB"),
                    ar("zone1", "rackA"),
                ],
                vec![ar("zone2", "rackA")],
            )),
        ),
        (
            "topology aggregation with no topology info",
            vec![],
            Cluster::new(&[&[], &[], &[]], &[&[], &[], &[]]),
            None,
        ),
        (
            "topology from selected node is not in allowedTopologies",
            allowed(&[&[(ZONE, &["zone1"])]]),
            Cluster::new(
                &[&[(ZONE, "zone2")], &[(ZONE, "zone1")], &[(ZONE, "zone1")]],
                &[&[ZONE], &[ZONE], &[ZONE]],
            ),
            None,
        ),
        (
            "allowedTopologies is subset of selected node's topology",
            allowed(&[&[(DISK, &["ssd"]), (ZONE, &["zone1"])]]),
            Cluster::new(
                &[
                    &[(ZONE, "zone1"), (RACK, "rack1"), (DISK, "ssd")],
                    &[(ZONE, "zone2"), (RACK, "rack2"), (DISK, "ssd")],
                    &[(ZONE, "zone2"), (RACK, "rack1"), (DISK, "nvme")],
                ],
                &[
                    &[ZONE, RACK, DISK],
                    &[ZONE, RACK, DISK],
                    &[ZONE, RACK, DISK],
                ],
            ),
            Some((
                vec![term(&[(DISK, "ssd"), (ZONE, "zone1")])],
                vec![term(&[(DISK, "ssd"), (RACK, "rack1"), (ZONE, "zone1")])],
            )),
        ),
        (
            "allowedTopologies is not the subset of selected node's topology",
            allowed(&[&[(ZONE, &["zone1"])]]),
            Cluster::new(
                &[
                    &[(ZONE, "zone10"), (RACK, "rack1")],
                    &[(ZONE, "zone11"), (RACK, "rack2")],
                ],
                zr_keys,
            ),
            None,
        ),
    ];
    for (name, allowed, cluster, want) in cases {
        for strict in [false, true] {
            for immediate in [false, true] {
                let got = cluster.run("testpvc", true, strict, immediate, &allowed);
                let label = format!("{name} strict={strict} immediate={immediate}");
                match &want {
                    Some((preferred, strict_preferred)) => {
                        let expected = if strict { strict_preferred } else { preferred };
                        let (_, got_preferred) = got
                            .unwrap_or_else(|e| panic!("{label}: {e}"))
                            .expect(&label);
                        assert_eq!(&got_preferred, expected, "{label}");
                    }
                    None => assert!(got.is_err(), "{label}: got {got:?}"),
                }
            }
        }
    }
}

fn four_racks() -> Cluster {
    let keys: &[&[&str]] = &[&[ZONE, RACK] as &[&str]; 4];
    Cluster::new(
        &[
            &[(ZONE, "zone1"), (RACK, "rackA")],
            &[(ZONE, "zone2"), (RACK, "rackB")],
            &[(ZONE, "zone3"), (RACK, "rackC")],
            &[(ZONE, "zone4"), (RACK, "rackD")],
        ],
        keys,
    )
}

// TestStatefulSetSpreading: no selected node; the name picks the first preferred term.
#[test]
fn statefulset_spreading() {
    let t = |i: usize| {
        term(&[
            (ZONE, ["zone1", "zone2", "zone3", "zone4"][i]),
            (RACK, ["rackA", "rackB", "rackC", "rackD"][i]),
        ])
    };
    let rotation = |first: usize| (0..4).map(|i| t((first + i) % 4)).collect::<Vec<_>>();
    let two_terms = allowed(&[
        &[(ZONE, &["zone2"]), (RACK, &["rackB"])],
        &[(ZONE, &["zone1"]), (RACK, &["rackA"])],
    ]);
    let cases: Vec<(&str, Vec<TopologySelectorTerm>, Vec<Term>)> = vec![
        ("testpvcA-testset-1", vec![], rotation(0)),
        ("testpvcB-testset-1", vec![], rotation(0)),
        (
            "testpvcC-testset-1",
            allowed(&[&[(ZONE, &["zone1"]), (RACK, &["rackA"])]]),
            vec![t(0)],
        ),
        ("testset-2", vec![], rotation(1)),
        ("testpvcB-testset-2", two_terms, vec![t(1), t(0)]),
        ("testpvc-testset-3", vec![], rotation(2)),
        ("testpvc-testset-4", vec![], rotation(3)),
    ];
    let cluster = four_racks();
    for (name, allowed, want) in cases {
        for strict in [false, true] {
            for immediate in [false, true] {
                let got = cluster
                    .run(name, false, strict, immediate, &allowed)
                    .unwrap();
                if !immediate && allowed.is_empty() {
                    assert_eq!(got, None, "{name}");
                } else {
                    assert_eq!(
                        got.map(|(_, preferred)| preferred),
                        Some(want.clone()),
                        "{name} {strict} {immediate}"
                    );
                }
            }
        }
    }
}

// TestProvisionWithDeletedNodeFromCache's nine combinations, and the README table rows. Feeding
// the same (cached) facts again must give the same answer.
#[test]
fn readme_table_and_cached_facts() {
    let t = |i: usize| {
        term(&[
            (ZONE, ["zone1", "zone2", "zone3"][i]),
            (RACK, ["rackA", "rackB", "rackC"][i]),
        ])
    };
    let cluster = Cluster::new(
        &[
            &[(ZONE, "zone1"), (RACK, "rackA")],
            &[(ZONE, "zone2"), (RACK, "rackB")],
            &[(ZONE, "zone3"), (RACK, "rackC")],
        ],
        &[&[ZONE, RACK] as &[&str]; 3],
    );
    let mut second_selected = Cluster::new(&[], &[]);
    second_selected.labels = vec![
        cluster.labels[1].clone(),
        cluster.labels[0].clone(),
        cluster.labels[2].clone(),
    ];
    second_selected.keys = cluster.keys.clone();
    second_selected.names = cluster.names.clone();
    let two = allowed(&[
        &[(ZONE, &["zone1"]), (RACK, &["rackA"])],
        &[(ZONE, &["zone2"]), (RACK, &["rackB"])],
    ]);
    let none: Vec<TopologySelectorTerm> = vec![];
    type Case<'a> = (
        &'a str,
        &'a Cluster,
        bool,
        bool,
        &'a [TopologySelectorTerm],
        Requirement,
    );
    let cases: Vec<Case> = vec![
        (
            "delayed, non-strict, no allowed",
            &cluster,
            true,
            false,
            &none,
            Some((vec![t(0), t(1), t(2)], vec![t(0), t(1), t(2)])),
        ),
        (
            "delayed, non-strict, no allowed, other node",
            &second_selected,
            true,
            false,
            &none,
            Some((vec![t(0), t(1), t(2)], vec![t(1), t(2), t(0)])),
        ),
        (
            "delayed, non-strict, allowed",
            &cluster,
            true,
            false,
            &two,
            Some((vec![t(0), t(1)], vec![t(0), t(1)])),
        ),
        (
            "delayed, strict, no allowed",
            &cluster,
            true,
            true,
            &none,
            Some((vec![t(0)], vec![t(0)])),
        ),
        (
            "delayed, strict, allowed",
            &cluster,
            true,
            true,
            &two,
            Some((vec![t(0)], vec![t(0)])),
        ),
        (
            "immediate, non-strict, no allowed",
            &cluster,
            false,
            false,
            &none,
            Some((vec![t(0), t(1), t(2)], vec![t(2), t(0), t(1)])),
        ),
        (
            "immediate, non-strict, allowed",
            &cluster,
            false,
            false,
            &two,
            Some((vec![t(0), t(1)], vec![t(0), t(1)])),
        ),
        (
            "immediate, strict, no allowed",
            &cluster,
            false,
            true,
            &none,
            Some((vec![t(0), t(1), t(2)], vec![t(2), t(0), t(1)])),
        ),
        (
            "immediate, strict, allowed",
            &cluster,
            false,
            true,
            &two,
            Some((vec![t(0), t(1)], vec![t(0), t(1)])),
        ),
    ];
    for (name, cluster, selected, strict, allowed, want) in cases {
        let first = cluster.run("testpvc", selected, strict, true, allowed);
        assert_eq!(first, Ok(want), "{name}");
        assert_eq!(
            cluster.run("testpvc", selected, strict, true, allowed),
            first,
            "{name} again"
        );
    }
    // Last README row: immediate binding, no allowed topologies, --immediate-topology=false.
    assert_eq!(cluster.run("testpvc", false, false, false, &none), Ok(None));
    assert_eq!(cluster.run("testpvc", false, true, false, &none), Ok(None));
    // allowedTopologies made of empty selector terms behaves as topology off.
    assert_eq!(
        cluster.run("testpvc", false, false, false, &allowed(&[&[]])),
        Ok(None)
    );
}

#[test]
fn empty_claim_name_uses_the_injected_hash() {
    let cluster = four_racks();
    let (keys, labels) = cluster.facts();
    let first_preferred = |random_hash| {
        let input = TopologyInput {
            claim_name: "",
            selected_node: Some(""),
            selected_node_topology_keys: None,
            selected_node_labels: None,
            strict_topology: false,
            immediate_topology: true,
            allowed_topologies: &[],
            csi_node_topology_keys: &keys,
            node_labels: &labels,
            random_hash,
        };
        let requirement = accessibility_requirements(&input).unwrap().unwrap();
        terms_of(&requirement.preferred)[0].clone()
    };
    assert_eq!(
        first_preferred(0),
        term(&[(ZONE, "zone1"), (RACK, "rackA")])
    );
    assert_eq!(
        first_preferred(6),
        term(&[(ZONE, "zone3"), (RACK, "rackC")])
    );
}
