//! component-base's leader-election metrics: `leader_election_master_status{name}` and
//! `leader_election_slowpath_total{name}`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

/// The two series of one elector. Cheap to clone; clones share values.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    master_status: Family<NameLabel, Gauge>,
    slowpath: Family<NameLabel, Counter>,
}

impl Metrics {
    /// Adds both families to `registry`. prometheus-client appends `_total` to counters.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leader_election_master_status",
            "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            self.master_status.clone(),
        );
        registry.register(
            "leader_election_slowpath",
            "[ALPHA] Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.",
            self.slowpath.clone(),
        );
    }

    pub(crate) fn set_leading(&self, name: &str, leading: bool) {
        self.master_status
            .get_or_create(&label(name))
            .set(i64::from(leading));
    }

    pub(crate) fn slow_path(&self, name: &str) {
        self.slowpath.get_or_create(&label(name)).inc();
    }
}

fn label(name: &str) -> NameLabel {
    NameLabel {
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn exposition(m: &Metrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn series_names_and_values() {
        let m = Metrics::default();
        m.set_leading("", false);
        let text = exposition(&m);
        assert!(
            text.contains("leader_election_master_status{name=\"\"} 0"),
            "{text}"
        );

        m.set_leading("", true);
        m.slow_path("");
        m.slow_path("");
        let text = exposition(&m);
        assert!(
            text.contains("# TYPE leader_election_master_status gauge"),
            "{text}"
        );
        assert!(
            text.contains("leader_election_master_status{name=\"\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE leader_election_slowpath counter"),
            "{text}"
        );
        assert!(
            text.contains("leader_election_slowpath_total{name=\"\"} 2"),
            "{text}"
        );
    }
}
