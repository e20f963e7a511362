use std::collections::BTreeMap;

use csi::v1::{CapacityRange, CreateVolumeRequest, Topology, TopologyRequirement};
use rstest::rstest;

use super::*;

const UID: &str = "6f1c2d3e-0000-4000-8000-000000000001";

fn request(name: &str) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        parameters: [("type".to_string(), "fast".to_string())].into(),
        secrets: [("password".to_string(), "hunter2".to_string())].into(),
        accessibility_requirements: Some(TopologyRequirement {
            requisite: vec![Topology {
                segments: [("zone".to_string(), "a".to_string())].into(),
            }],
            preferred: vec![],
        }),
        ..Default::default()
    }
}

fn entry(uid: &str) -> Entry {
    let claim = ClaimId {
        namespace: "ns",
        name: "data",
        uid,
    };
    let secret = SecretRef {
        name: "creds".into(),
        namespace: "vault".into(),
    };
    Entry::new(
        claim,
        "fast",
        None,
        &request(&format!("pvc-{uid}")),
        Some(&secret),
    )
}

#[test]
fn an_entry_keeps_the_request_but_never_its_secrets() {
    let e = entry(UID);
    let value = e.value();
    assert!(!value.contains("hunter2"), "{value}");
    let want = CreateVolumeRequest {
        secrets: Default::default(),
        ..request(&format!("pvc-{UID}"))
    };
    assert_eq!(e.request().unwrap(), want);
    assert_eq!(e.volume, format!("pvc-{UID}"));
    assert_eq!(
        e.secret,
        Some(SecretName {
            namespace: "vault".into(),
            name: "creds".into()
        })
    );
    assert_eq!(e.key(), format!("record.csi-provisioner/{UID}"));
    // The value reads back as the same entry.
    let annotations = BTreeMap::from([(e.key(), value)]);
    let (read, bad) = entries(&annotations);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(read, vec![e]);
}

#[test]
fn reading_skips_others_annotations_and_names_what_is_broken() {
    let good = entry(UID);
    let other = entry("other-uid");
    let annotations = BTreeMap::from([
        ("example.com/owner".to_string(), "team-a".to_string()),
        (good.key(), good.value()),
        (key_of("moved"), other.value()),
        (key_of("garbled"), "{not json".to_string()),
    ]);
    let (read, bad) = entries(&annotations);
    assert_eq!(read, vec![good]);
    let messages: Vec<String> = bad.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("names claim UID other-uid")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("garbled: not an entry")),
        "{messages:?}"
    );
}

#[test]
fn pending_asks_cancel_each_other() {
    let mut p = Pending::default();
    assert!(p.is_empty());
    p.add(entry("a"));
    p.add(entry("b"));
    // A removal cancels the add and hands it back for its waiter.
    assert_eq!(p.remove("a").map(|e| e.uid), Some("a".into()));
    assert_eq!(p.remove("c"), None);
    // An add cancels a pending removal of the same claim.
    p.add(entry("c"));
    let current = BTreeMap::from([(key_of("c"), "old".to_string())]);
    let (write, left) = plan(
        &current,
        p,
        Limits {
            entries: 10,
            bytes: MAX_BYTES,
        },
    );
    let write = write.unwrap();
    assert_eq!(write.added, vec!["b".to_string(), "c".to_string()]);
    assert_eq!(write.removed, Vec::<String>::new(), "a was never written");
    assert!(left.is_empty());
}

#[test]
fn one_write_removes_first_and_carries_what_fits_in_order() {
    let kept = entry("kept");
    let current = BTreeMap::from([
        ("example.com/owner".to_string(), "team-a".to_string()),
        (kept.key(), kept.value()),
        (key_of("done"), entry("done").value()),
    ]);
    let mut p = Pending::default();
    p.remove("done");
    p.remove("never-there");
    for uid in ["a", "b", "c"] {
        p.add(entry(uid));
    }
    // Room for three entries: "done" leaves, so "kept", "a" and "b" fit and "c" waits.
    let (write, left) = plan(
        &current,
        p,
        Limits {
            entries: 3,
            bytes: MAX_BYTES,
        },
    );
    let write = write.unwrap();
    assert_eq!(write.removed, vec!["done".to_string()]);
    assert_eq!(write.added, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(write.annotations["example.com/owner"], "team-a");
    assert!(write.annotations.contains_key(&kept.key()));
    assert!(!write.annotations.contains_key(&key_of("done")));
    assert_eq!(
        left.adds.iter().map(|e| e.uid.as_str()).collect::<Vec<_>>(),
        ["c"]
    );
}

#[test]
fn the_byte_limit_defers_in_arrival_order() {
    let (small, big) = (entry("s1"), {
        let mut r = request("pvc-big");
        r.parameters.insert("blob".into(), "x".repeat(4000));
        Entry::new(
            ClaimId {
                namespace: "ns",
                name: "big",
                uid: "big",
            },
            "fast",
            None,
            &r,
            None,
        )
    });
    let limits = Limits {
        entries: 100,
        bytes: small.size() + big.size() - 1,
    };
    let mut p = Pending::default();
    p.add(small.clone());
    p.add(big.clone());
    p.add(entry("s2"));
    let (write, left) = plan(&BTreeMap::new(), p, limits);
    assert_eq!(write.unwrap().added, vec!["s1".to_string()]);
    // s2 would fit, but it does not overtake the large entry that came first.
    let waiting: Vec<&str> = left.adds.iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(waiting, ["big", "s2"]);
}

#[test]
fn replacing_an_entry_takes_no_new_room_and_nothing_to_do_is_no_write() {
    let e = entry("a");
    let current = BTreeMap::from([(e.key(), e.value())]);
    let mut p = Pending::default();
    p.add(e.clone());
    let (write, _) = plan(
        &current,
        p,
        Limits {
            entries: 1,
            bytes: MAX_BYTES,
        },
    );
    assert_eq!(write.unwrap().added, vec!["a".to_string()]);
    let mut p = Pending::default();
    p.remove("absent");
    let (write, left) = plan(
        &current,
        p,
        Limits {
            entries: 1,
            bytes: MAX_BYTES,
        },
    );
    assert_eq!(write, None);
    assert!(left.is_empty());
}

#[rstest]
#[case::a_pv_owns_the_volume(Some((UID, false)), true, OnStart::Remove)]
#[case::a_pv_even_for_a_gone_claim(None, true, OnStart::Remove)]
#[case::the_claim_waits_for_its_volume(Some((UID, false)), false, OnStart::Keep)]
#[case::the_claim_is_gone(None, false, OnStart::CleanUp)]
#[case::the_claim_is_being_deleted(Some((UID, true)), false, OnStart::CleanUp)]
#[case::a_new_claim_under_the_same_name(Some(("another-uid", false)), false, OnStart::CleanUp)]
fn at_start(#[case] claim: Option<(&str, bool)>, #[case] pv: bool, #[case] want: OnStart) {
    let claim = claim.map(|(uid, deleting)| ClaimNow { uid, deleting });
    assert_eq!(on_start(&entry(UID), claim, pv), want);
}

#[rstest]
#[case::nothing_sent_or_final_errors(VolumeState::None, false, true)]
#[case::another_claims_name(VolumeState::Collision, false, true)]
#[case::a_call_without_an_answer(VolumeState::MayExist, false, false)]
#[case::created_without_a_pv(VolumeState::Created("vol-1".into()), false, false)]
#[case::unknown_after_a_restart(VolumeState::Unknown, false, false)]
#[case::the_pv_is_saved(VolumeState::Created("vol-1".into()), true, true)]
fn leaving_the_record(#[case] state: VolumeState, #[case] pv_saved: bool, #[case] want: bool) {
    assert_eq!(may_leave(&state, pv_saved), want);
}

#[rstest]
#[case::the_pv_names_the_volume(Leaving::PvSaved, false)]
#[case::no_volume_to_make_again(Leaving::NoVolume, false)]
#[case::a_probe_would_make_it_again(Leaving::VolumeDeleted, true)]
fn which_removal_waits_for_company(#[case] why: Leaving, #[case] at_once: bool) {
    assert_eq!(written_at_once(why), at_once);
}

#[test]
fn lease_names_fit_and_stay_apart() {
    assert_eq!(
        lease_name("hostpath.csi.k8s.io", None),
        "csi-provisioner-record-hostpath.csi.k8s.io"
    );
    assert_eq!(
        lease_name("Example/Driver", Some("node-1")),
        "csi-provisioner-record-example-driver-node-1"
    );
    let long = |last: char| format!("{}{last}", "n".repeat(250));
    let (a, b) = (
        lease_name("hostpath.csi.k8s.io", Some(&long('a'))),
        lease_name("hostpath.csi.k8s.io", Some(&long('b'))),
    );
    assert!(a.len() <= 253 && b.len() <= 253, "{a} {b}");
    assert_ne!(a, b);
    assert!(
        a.starts_with("csi-provisioner-record-hostpath.csi.k8s.io-nnn"),
        "{a}"
    );
}

#[rstest]
#[case::before_the_first_write_a_predecessor_is_taken_over(false, Some("old"), false)]
#[case::a_new_record(false, None, false)]
#[case::still_ours(true, Some("me"), false)]
#[case::someone_else_wrote_it(true, Some("new"), true)]
#[case::no_holder_named(true, None, false)]
fn who_holds_the_record(#[case] owned: bool, #[case] holder: Option<&str>, #[case] want: bool) {
    assert_eq!(taken_over(owned, holder, "me"), want);
}
