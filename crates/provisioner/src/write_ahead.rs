//! The write-ahead record's writer (issue 49 step 2, `docs/design/write-ahead-record.md`): one
//! task owns the record's Lease and turns everything asked of it meanwhile into one PUT, so a
//! burst of claims costs a few writes, not one each. The pure rules are
//! `provisioning::record`; here is only the I/O. The claim controller uses it
//! (`claims/entries.rs`) unless [`SWITCH`] is `false`; then claims hold our finalizer.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use controller_kit::client::Budget;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use provisioning::record::{self, Entry, Leaving, Limits, Pending};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The environment variable that turns the record off (`false`): claims then hold our
/// finalizer instead, as before the record.
pub use provisioning::record::SWITCH;

/// Whether the record holds claims: unless [`SWITCH`] is `false`.
pub fn switched_on() -> bool {
    std::env::var(SWITCH).map_or(true, |v| v != "false")
}

/// The entries the record holds now (none when it does not exist yet); an entry that cannot
/// be read is logged and left where it is.
pub async fn read_entries(api: &Api<Lease>, lease: &str) -> Result<Vec<Entry>, kube::Error> {
    let Some(found) = api.get_opt(lease).await? else {
        return Ok(Vec::new());
    };
    let annotations = found.metadata.annotations.unwrap_or_default();
    let (entries, unreadable) = record::entries(&annotations);
    for e in unreadable {
        tracing::error!(lease, err = %e, "Ignoring an entry of the write-ahead record that cannot be read");
    }
    Ok(entries)
}

/// Removals wait this long for company before they are written on their own.
const REMOVE_AFTER: Duration = Duration::from_secs(1);
/// After a refused write, the next one waits this long.
const AFTER_REFUSAL: Duration = Duration::from_secs(1);

/// Why an entry was not recorded: its CreateVolume must not be sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordWriteError {
    /// The API server refused the write (RBAC, an admission policy, a network error).
    #[error("the write-ahead record {lease} could not be written: {message}")]
    Refused {
        /// The record's Lease.
        lease: String,
        /// What the API server said.
        message: String,
    },
    /// Another instance took the record over: this one must not provision.
    #[error("the write-ahead record {lease} is held by {holder}, not by this instance")]
    NotOwner {
        /// The record's Lease.
        lease: String,
        /// Who holds it now.
        holder: String,
    },
    /// The entry was let go before a write carried it.
    #[error("the write-ahead entry of claim {uid} was let go before it was written")]
    Withdrawn {
        /// The claim's UID.
        uid: String,
    },
    /// The writer task has ended (shutdown).
    #[error("the write-ahead record's writer has stopped")]
    Stopped,
}

type Reply = oneshot::Sender<Result<(), RecordWriteError>>;

enum Ask {
    Add(Entry, Reply),
    /// A removal; `urgent` ones are written at once instead of waiting for company.
    Remove {
        uid: String,
        urgent: bool,
    },
    /// Answered once no removal of `uid`'s entry waits for a write any more.
    Settle {
        uid: String,
        reply: oneshot::Sender<()>,
    },
}

/// The handle workers use.
#[derive(Clone)]
pub struct WriteAhead {
    tx: mpsc::UnboundedSender<Ask>,
}

impl WriteAhead {
    /// Records `entry`; returns once a write that carries it has succeeded.
    pub async fn record(&self, entry: Entry) -> Result<(), RecordWriteError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Ask::Add(entry, reply))
            .map_err(|_| RecordWriteError::Stopped)?;
        answer.await.map_err(|_| RecordWriteError::Stopped)?
    }

    /// Lets claim `uid`'s entry go, at once or with the next batch as
    /// [`record::written_at_once`] says for `why`; not waited for (a lost removal leaves an
    /// entry that the start-up pass drops).
    pub fn forget(&self, uid: &str, why: Leaving) {
        let uid = uid.to_string();
        let urgent = record::written_at_once(why);
        let _ = self.tx.send(Ask::Remove { uid, urgent });
    }

    /// Returns once a removal of claim `uid`'s entry asked for earlier is written (at once
    /// if none waits; also when the write fails, after it was tried). Before DeleteVolume of
    /// the claim's PV: an entry that outlives the volume would, after a crash, have the next
    /// instance probe for it and make the volume again.
    pub async fn settle(&self, uid: &str) {
        let (reply, settled) = oneshot::channel();
        let uid = uid.to_string();
        if self.tx.send(Ask::Settle { uid, reply }).is_ok() {
            let _ = settled.await;
        }
    }
}

/// Starts the writer of Lease `lease` in `api`'s namespace, taking it over for `identity`;
/// it ends with `cancel`. `api`'s client is prepaid: each request is sent after a turn of
/// `budget` (`controller_kit::client::ThrottleLayer::prepaid`).
pub fn start(
    api: Api<Lease>,
    budget: Budget,
    lease: String,
    identity: String,
    limits: Limits,
    cancel: CancellationToken,
) -> (WriteAhead, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = Writer {
        api,
        budget,
        lease,
        identity,
        limits,
        pending: Pending::default(),
        waiters: HashMap::new(),
        settling: HashMap::new(),
        urgent: false,
        current: None,
        owned: false,
        lost: None,
    };
    let task = tokio::spawn(writer.run(rx, cancel));
    (WriteAhead { tx }, task)
}

struct Writer {
    api: Api<Lease>,
    budget: Budget,
    lease: String,
    identity: String,
    limits: Limits,
    pending: Pending,
    /// Who waits for each pending add, by claim UID.
    waiters: HashMap<String, Vec<Reply>>,
    /// Who waits for each pending removal ([`WriteAhead::settle`]), by claim UID.
    settling: HashMap<String, Vec<oneshot::Sender<()>>>,
    /// An urgent removal is pending: write without waiting for company.
    urgent: bool,
    /// The Lease as last read or written (`None`: read it before the next write).
    current: Option<Lease>,
    /// Whether a write of this instance has succeeded (it holds the record).
    owned: bool,
    /// Set once another instance took the record over: every ask fails from then on.
    lost: Option<String>,
}

/// What the loop does after a write.
enum Next {
    /// Write again at once (more may fit, or the Lease changed under us).
    Again,
    /// Wait for the next ask.
    Wait,
    /// Wait until then (after a refused write), then write again.
    Until(Instant),
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Ask>, cancel: CancellationToken) {
        let mut next = Next::Wait;
        // Removals alone wait for an add to ride on, or until then.
        let mut removals_due: Option<Instant> = None;
        loop {
            let due = match next {
                Next::Again => Some(Instant::now()),
                Next::Until(t) => Some(t),
                Next::Wait if self.only_removals() => {
                    Some(*removals_due.get_or_insert_with(|| Instant::now() + REMOVE_AFTER))
                }
                Next::Wait => None,
            };
            let timer = async {
                match due {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                ask = rx.recv() => match ask {
                    Some(ask) => {
                        self.take(ask);
                        while let Ok(ask) = rx.try_recv() {
                            self.take(ask);
                        }
                        // Only an add or an urgent removal is written at once: other removals
                        // wait for company, and a refused write's pause holds.
                        let now = !self.waiters.is_empty() || self.urgent;
                        if !now || matches!(next, Next::Until(_)) {
                            continue;
                        }
                    }
                    None => break,
                },
                () = timer => {}
            }
            // Everything asked meanwhile rides on the same write.
            while let Ok(ask) = rx.try_recv() {
                self.take(ask);
            }
            removals_due = None;
            self.urgent = false;
            next = self.write_once(&mut rx).await;
            // A refused write's removals stay pending, but deletions waiting for them go on.
            self.answer_settled(matches!(next, Next::Until(_)));
        }
        self.fail_all(&RecordWriteError::Stopped);
    }

    fn only_removals(&self) -> bool {
        !self.pending.is_empty() && self.waiters.is_empty()
    }

    fn take(&mut self, ask: Ask) {
        match ask {
            Ask::Add(entry, reply) => {
                if let Some(holder) = &self.lost {
                    let _ = reply.send(Err(self.not_owner(holder)));
                    return;
                }
                self.waiters
                    .entry(entry.uid.clone())
                    .or_default()
                    .push(reply);
                self.pending.add(entry);
            }
            Ask::Remove { uid, urgent } => {
                self.urgent |= urgent;
                if self.pending.remove(&uid).is_some() {
                    let withdrawn = RecordWriteError::Withdrawn { uid: uid.clone() };
                    self.answer(&uid, Err(withdrawn));
                }
            }
            Ask::Settle { uid, reply } => {
                // An instance that lost the record writes nothing more: nothing to wait for.
                if self.lost.is_none() && self.pending.removing(&uid) {
                    self.urgent = true;
                    self.settling.entry(uid).or_default().push(reply);
                } else {
                    let _ = reply.send(());
                }
            }
        }
    }

    /// Answers who waits for removals no longer pending (all of them with `all`).
    fn answer_settled(&mut self, all: bool) {
        let pending = &self.pending;
        self.settling.retain(|uid, replies| {
            if all || !pending.removing(uid) {
                for reply in replies.drain(..) {
                    let _ = reply.send(());
                }
                false
            } else {
                true
            }
        });
    }

    fn answer(&mut self, uid: &str, result: Result<(), RecordWriteError>) {
        for reply in self.waiters.remove(uid).unwrap_or_default() {
            let _ = reply.send(result.clone());
        }
    }

    fn fail_all(&mut self, e: &RecordWriteError) {
        for (_, replies) in self.waiters.drain() {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }

    fn not_owner(&self, holder: &str) -> RecordWriteError {
        RecordWriteError::NotOwner {
            lease: self.lease.clone(),
            holder: holder.to_string(),
        }
    }

    fn refused(&self, e: &kube::Error) -> RecordWriteError {
        RecordWriteError::Refused {
            lease: self.lease.clone(),
            message: e.to_string(),
        }
    }

    /// Plans and sends one write of everything pending when the write's turn comes.
    async fn write_once(&mut self, rx: &mut mpsc::UnboundedReceiver<Ask>) -> Next {
        if self.pending.is_empty() || self.lost.is_some() {
            return Next::Wait;
        }
        let lease = match self.read().await {
            Ok(lease) => lease,
            Err(e) => {
                let e = self.refused(&e);
                tracing::warn!(lease = %self.lease, err = %e, "Reading the write-ahead record failed");
                self.fail_all(&e);
                self.pending = std::mem::take(&mut self.pending).without_adds();
                return Next::Until(Instant::now() + AFTER_REFUSAL);
            }
        };
        // At the default QPS the turn can come many seconds later (behind the PVs of the
        // claims recorded last time): the write carries every entry asked for meanwhile, not
        // only those there when it was planned.
        self.budget.turn().await;
        while let Ok(ask) = rx.try_recv() {
            self.take(ask);
        }
        // This write carries every removal asked for so far, urgent ones drained just now
        // included: the next lone removal waits for company again.
        self.urgent = false;
        let holder = holder_of(&lease);
        if record::taken_over(self.owned, holder.as_deref(), &self.identity) {
            let holder = holder.unwrap_or_default();
            tracing::warn!(lease = %self.lease, %holder, "Another instance took the write-ahead record over; not provisioning");
            let e = self.not_owner(&holder);
            self.fail_all(&e);
            self.pending = Pending::default();
            self.lost = Some(holder);
            return Next::Wait;
        }
        let annotations = lease.metadata.annotations.clone().unwrap_or_default();
        let (write, left) = record::plan(&annotations, self.pending.clone(), self.limits);
        let Some(write) = write else {
            // Adds wait for room, which removals will make; removals of entries not in the
            // record are done.
            self.pending = left;
            return Next::Wait;
        };
        let mut updated = lease.clone();
        updated.metadata.annotations = Some(write.annotations.clone());
        updated
            .spec
            .get_or_insert_with(LeaseSpec::default)
            .holder_identity = Some(self.identity.clone());
        match self
            .api
            .replace(&self.lease, &PostParams::default(), &updated)
            .await
        {
            Ok(saved) => {
                self.current = Some(saved);
                self.owned = true;
                self.pending = left;
                for uid in &write.added {
                    self.answer(uid, Ok(()));
                }
                tracing::debug!(lease = %self.lease, added = write.added.len(), removed = write.removed.len(), "Wrote the write-ahead record");
                if self.pending.is_empty() {
                    Next::Wait
                } else {
                    Next::Again
                }
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Changed since it was read: read again and plan again.
                self.current = None;
                Next::Again
            }
            Err(e) => {
                let e = self.refused(&e);
                tracing::warn!(lease = %self.lease, err = %e, "Writing the write-ahead record failed; the claims waiting for it are not provisioned");
                // Every waiting add fails, also those this write left for later: their
                // claims retry on their own backoff. Removals stay for the next write.
                self.fail_all(&e);
                self.pending = std::mem::take(&mut self.pending).without_adds();
                self.current = None;
                Next::Until(Instant::now() + AFTER_REFUSAL)
            }
        }
    }

    /// The Lease as last seen, or read (and created when missing).
    async fn read(&mut self) -> Result<Lease, kube::Error> {
        if let Some(lease) = &self.current {
            return Ok(lease.clone());
        }
        self.budget.turn().await;
        let lease = match self.api.get_opt(&self.lease).await? {
            Some(lease) => lease,
            None => {
                let new = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.lease.clone()),
                        annotations: Some(BTreeMap::new()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        ..Default::default()
                    }),
                };
                self.budget.turn().await;
                match self.api.create(&PostParams::default(), &new).await {
                    Ok(created) => created,
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        self.budget.turn().await;
                        self.api.get(&self.lease).await?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(lease)
    }
}

fn holder_of(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}
