//! The capacity view (`/capacity`, ours) from the controller's state: what is published, what
//! the driver said, what is reserved, how old the last answer is, and the claims waiting for a
//! node.

use std::collections::BTreeMap;

use capacity::segment::display;
use capacity::view::{Row, View, Waiting, waiting_class};
use tokio::time::Instant;

use super::Shared;

impl Shared {
    pub(super) fn view(&self) -> View {
        let now = Instant::now();
        let state = self.state.lock();
        let freshness: BTreeMap<_, _> = state
            .staleness
            .snapshot(now)
            .into_iter()
            .map(|f| (f.key.clone(), f))
            .collect();
        let mut rows: Vec<Row> = state
            .desired
            .iter()
            .map(|key| {
                let published = state.index.live(key);
                let reading = state.readings.get(key);
                let round = reading.map_or(0, |(_, r)| *r);
                let reserved = state.ledger.reserved(key, round, None);
                let fresh = freshness.get(key);
                Row {
                    class: key.class.clone(),
                    segment: display(&key.segment).to_string(),
                    capacity: published.and_then(|p| p.capacity),
                    maximum_volume_size: published.and_then(|p| p.maximum_volume_size),
                    reading: reading.map(|(c, _)| c.available),
                    reserved: reserved.bytes,
                    in_flight: reserved.held,
                    seconds_since_success: fresh.map(|f| f.seconds_since_success),
                    consecutive_failures: fresh.map_or(0, |f| f.consecutive_failures),
                    stale: self
                        .config
                        .stale_after
                        .is_some_and(|after| state.staleness.is_stale(key, now, after)),
                }
            })
            .collect();
        rows.sort_by(|a, b| (&a.class, &a.segment).cmp(&(&b.class, &b.segment)));
        let mut waiting: BTreeMap<String, usize> =
            state.classes.keys().map(|c| (c.clone(), 0)).collect();
        // A claim waiting for a node is not Bound.
        for claim in self.caches.unsettled_claims() {
            if let Some(n) =
                waiting_class(&claim, &self.config.driver_name).and_then(|c| waiting.get_mut(c))
            {
                *n += 1;
            }
        }
        View {
            driver: self.config.driver_name.clone(),
            rows,
            waiting: waiting
                .into_iter()
                .map(|(class, claims)| Waiting { class, claims })
                .collect(),
        }
    }
}
