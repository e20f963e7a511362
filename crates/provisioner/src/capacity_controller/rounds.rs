//! Which refreshes of one key a waiter may count as its own.
//!
//! A caller of `RefreshHandle::refresh_and_wait` wants a GetCapacity that was *asked after*
//! its call: a refresh already in flight may have read the driver before the event the caller
//! reacts to (a refused CreateVolume) and would publish the old value. The work queue runs at
//! most one refresh of a key at a time, so counting starts and ends is enough.

/// Refreshes of one key: how many began, how many ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rounds {
    started: u64,
    finished: u64,
}

impl Rounds {
    /// A worker took the key off the queue: the number of this round.
    pub(super) fn start(&mut self) -> u64 {
        self.started += 1;
        self.started
    }

    /// The refresh ended (published or failed).
    pub(super) fn finish(&mut self) {
        self.finished = self.started;
    }

    /// What a waiter remembers when it asks: refreshes up to this one do not count.
    pub(super) fn ticket(&self) -> u64 {
        self.started
    }

    /// How many refreshes have ended (their readings are in).
    pub(super) fn finished(&self) -> u64 {
        self.finished
    }

    /// A refresh that began after `ticket` was taken has ended.
    pub(super) fn served(&self, ticket: u64) -> bool {
        self.finished > ticket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_key_is_served_by_the_next_refresh() {
        let mut r = Rounds::default();
        let t = r.ticket();
        assert!(!r.served(t));
        r.start();
        assert!(!r.served(t), "in flight, not ended");
        r.finish();
        assert!(r.served(t));
    }

    #[test]
    fn a_refresh_in_flight_when_asked_does_not_count() {
        let mut r = Rounds::default();
        r.start(); // began before the caller asked
        let t = r.ticket();
        r.finish();
        assert!(!r.served(t), "that refresh may have read the old value");
        r.start(); // the queued again (dirty) key
        r.finish();
        assert!(r.served(t));
    }

    #[test]
    fn earlier_finished_refreshes_do_not_count() {
        let mut r = Rounds::default();
        for _ in 0..3 {
            r.start();
            r.finish();
        }
        let t = r.ticket();
        assert!(!r.served(t));
        r.start();
        r.finish();
        assert!(r.served(t));
    }
}
