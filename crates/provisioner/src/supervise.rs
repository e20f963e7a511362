//! The supervisor: named tasks that must run until shutdown. One that ends or panics earlier
//! leaves the provisioner silently broken, so it ends the process instead (`main` exits 1
//! with the task's name). Start-up (`app::run`) and the controllers (`run_controllers`) each
//! own one.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::stopped::AppError;

/// The controllers' tasks, by name. Each runs until cancel: one that ends earlier (returned or
/// panicked) leaves the provisioner silently broken, so it ends its owner instead.
#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) set: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Tasks {
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let id = self.set.spawn(task).id();
        self.names.insert(id, name);
    }

    /// Waits up to `bound` for the tasks named `names` to end (others may end meanwhile).
    pub(crate) async fn drain(&mut self, names: &[&str], bound: Duration) {
        let mut waiting: Vec<&str> = names.to_vec();
        let deadline = tokio::time::Instant::now() + bound;
        while !waiting.is_empty() {
            match tokio::time::timeout_at(deadline, self.set.join_next_with_id()).await {
                Ok(Some(joined)) => {
                    let id = match &joined {
                        Ok((id, ())) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some(name) = self.names.get(&id) {
                        waiting.retain(|w| w != name);
                    }
                }
                Ok(None) => return,
                Err(_) => {
                    tracing::warn!(tasks = ?waiting, "In-flight work did not finish in time; exiting anyway");
                    return;
                }
            }
        }
        tracing::info!("In-flight work finished");
    }

    /// `Ok` once `cancel` fires; an error naming the first task that ends before.
    pub(crate) async fn until_cancelled(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<(), AppError> {
        let joined = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(()),
            Some(joined) = self.set.join_next_with_id() => joined,
        };
        let (id, reason) = match joined {
            Ok((id, ())) => (id, "ended unexpectedly".to_string()),
            Err(e) => (
                e.id(),
                if e.is_panic() {
                    format!(
                        "panicked: {}",
                        controller_kit::workqueue::panic_message(e.into_panic().as_ref())
                    )
                } else {
                    "was aborted".to_string()
                },
            ),
        };
        let task = self.names.get(&id).copied().unwrap_or("unknown");
        Err(AppError::TaskFailed { task, reason })
    }

    /// The error naming the first task to end before `cancel`; never resolves otherwise (tasks
    /// that stop on shutdown are no failure). For racing against the work they support.
    pub(crate) async fn first_failure(&mut self, cancel: &CancellationToken) -> AppError {
        match self.until_cancelled(cancel).await {
            Err(e) => e,
            Ok(()) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(tasks: &mut Tasks, name: &'static str) {
        tasks.spawn(name, std::future::pending());
    }

    #[tokio::test]
    async fn the_first_task_to_end_before_cancel_is_named() {
        /// What the doomed task does; `None`: no such task, cancel fires first.
        type Body = Option<fn()>;
        let cases: [(Body, Option<&str>); 3] = [
            (None, None),
            (
                Some(|| ()),
                Some("controller task doomed stopped: ended unexpectedly"),
            ),
            (
                Some(|| panic!("worker boom")),
                Some("controller task doomed stopped: panicked: worker boom"),
            ),
        ];
        for (body, want) in cases {
            let mut tasks = Tasks::default();
            running(&mut tasks, "first");
            let cancel = CancellationToken::new();
            match body {
                Some(body) => tasks.spawn("doomed", async move { body() }),
                None => cancel.cancel(),
            }
            running(&mut tasks, "last");
            let got = tasks.until_cancelled(&cancel).await;
            assert_eq!(got.err().map(|e| e.to_string()).as_deref(), want);
            tasks.set.abort_all();
        }
    }

    /// Raced against the work: a failure before shutdown ends the race, a task that stops on
    /// shutdown never does.
    #[tokio::test]
    async fn first_failure_resolves_only_for_an_early_end() {
        let cancel = CancellationToken::new();
        let mut tasks = Tasks::default();
        running(&mut tasks, "server");
        tasks.spawn("events", async {});
        let failure = tasks.first_failure(&cancel).await;
        assert_eq!(
            failure.to_string(),
            "controller task events stopped: ended unexpectedly"
        );
        let mut tasks = Tasks::default();
        let stop = cancel.clone();
        tasks.spawn("signal handler", async move { stop.cancel() });
        let raced =
            tokio::time::timeout(Duration::from_millis(50), tasks.first_failure(&cancel)).await;
        assert!(raced.is_err(), "a task ending on shutdown is no failure");
    }
}
