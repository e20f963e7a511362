//! The election record kept in a Lease spec (client-go's `LeaderElectionRecord`).

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{RoundMode, Timestamp, TimestampRound, Unit};

/// What a Lease says about its holder. Missing spec fields read as empty/zero, as in client-go,
/// so an empty or half-written Lease is simply "not held".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder_identity: String,
    /// May be zero or negative in a hand-edited Lease; both mean "already expired".
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub lease_transitions: i32,
    /// Coordinated-election fields: read so that a change to them counts as a change of the
    /// record, never written by us (client-go drops them on update too).
    pub preferred_holder: Option<String>,
    pub strategy: Option<String>,
}

impl LeaseRecord {
    /// Reads a Lease spec; `None` (no spec at all) is the empty record.
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            lease_transitions: spec.lease_transitions.unwrap_or(0),
            preferred_holder: spec.preferred_holder.clone(),
            strategy: spec.strategy.clone(),
        }
    }

    /// The spec we write: every field set, like client-go's `LeaderElectionRecordToLeaseSpec`
    /// (an empty holder is written as `""`, which is how a release looks on the wire).
    pub fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.lease_transitions),
            preferred_holder: self.preferred_holder.clone(),
            strategy: self.strategy.clone(),
        }
    }
}

/// Wall-clock time as the API server stores a MicroTime, so that a record we wrote compares
/// equal to the same record read back.
pub fn micro_now() -> Timestamp {
    truncate_to_micros(Timestamp::now())
}

pub(crate) fn truncate_to_micros(t: Timestamp) -> Timestamp {
    let micros = TimestampRound::new()
        .smallest(Unit::Microsecond)
        .mode(RoundMode::Trunc);
    t.round(micros).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn reading_specs() {
        let full = LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(ts("2026-01-01T00:00:00Z"))),
            renew_time: Some(MicroTime(ts("2026-01-01T00:00:05Z"))),
            lease_transitions: Some(3),
            preferred_holder: None,
            strategy: None,
        };
        let table: [(Option<LeaseSpec>, LeaseRecord); 4] = [
            (None, LeaseRecord::default()),
            (Some(LeaseSpec::default()), LeaseRecord::default()),
            (
                Some(LeaseSpec {
                    holder_identity: Some("b".into()),
                    ..LeaseSpec::default()
                }),
                LeaseRecord {
                    holder_identity: "b".into(),
                    ..LeaseRecord::default()
                },
            ),
            (
                Some(full),
                LeaseRecord {
                    holder_identity: "a".into(),
                    lease_duration_seconds: 15,
                    acquire_time: Some(ts("2026-01-01T00:00:00Z")),
                    renew_time: Some(ts("2026-01-01T00:00:05Z")),
                    lease_transitions: 3,
                    preferred_holder: None,
                    strategy: None,
                },
            ),
        ];
        for (spec, want) in table {
            assert_eq!(LeaseRecord::from_spec(spec.as_ref()), want, "spec {spec:?}");
        }
    }

    #[test]
    fn written_spec_reads_back_identically() {
        let rec = LeaseRecord {
            holder_identity: "me".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(micro_now()),
            renew_time: Some(micro_now()),
            lease_transitions: 7,
            preferred_holder: None,
            strategy: None,
        };
        assert_eq!(LeaseRecord::from_spec(Some(&rec.to_spec())), rec);
        let released = LeaseRecord {
            holder_identity: String::new(),
            ..rec
        };
        assert_eq!(released.to_spec().holder_identity.as_deref(), Some(""));
    }

    #[test]
    fn micro_truncation() {
        let t = ts("2026-01-01T00:00:00.123456789Z");
        assert_eq!(truncate_to_micros(t), ts("2026-01-01T00:00:00.123456Z"));
        let json = serde_json::to_string(&MicroTime(truncate_to_micros(t))).expect("serialise");
        assert_eq!(json, "\"2026-01-01T00:00:00.123456Z\"");
    }
}
