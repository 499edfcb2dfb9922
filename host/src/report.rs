//! What a host tells its operator. Each thing that happens in a host's life — the admin server
//! listening, joining and leaving the group, an assignment, a task assigned, revoked or halted, an
//! offset commit, a consumer error, a delivery sent again, a plugin swapped or refused — is a
//! [`Happened`], emitted once where it happens. [`Happened::emit`] writes its log line and bumps
//! its counter side by side, in one match, so a log line and its count cannot drift apart (as
//! vector's internal events do).
//!
//! Per-record and per-call counts (matches, expiries, late records, dead-letter decisions, call
//! latencies) are not here: the tasks and plugin workers count those without a lock, and the run
//! loop publishes them once per round (metrics.rs). They are not logged one by one either, except
//! a failure, which is logged where it is decided, with the record it concerns.
//!
//! Log lines go to the `cojoin::report` target, at info unless something went wrong, so the
//! default filter (main.rs) shows exactly these.

use std::fmt::Display;

use crate::join::CommitPoint;
use crate::metrics::Metrics;

/// One thing that happened; see the module doc.
pub enum Happened<'a> {
    AdminListening {
        url: &'a dyn Display,
    },
    JoiningGroup {
        left: &'a str,
        right: &'a str,
        partitions: usize,
        group: &'a str,
    },
    /// The group gave this host these partitions (a rebalance).
    Assignment {
        left: &'a [i32],
        right: &'a [i32],
    },
    TaskAssigned {
        task: i32,
        start: &'a [CommitPoint; 2],
    },
    TaskRevoked {
        task: i32,
    },
    /// A task stopped under `plugin.failure = "halt"`; its partitions are paused.
    TaskHalted {
        task: i32,
        reason: &'a str,
        left: &'a str,
        right: &'a str,
    },
    LeftGroup,
    Committed {
        partitions: usize,
        on_revoke: bool,
    },
    CommitFailed {
        partitions: usize,
        on_revoke: bool,
        error: &'a dyn Display,
    },
    ConsumerError {
        error: &'a dyn Display,
    },
    /// A delivery failed for a reason that may pass (a timeout, a broker away): sent again.
    DeliveryRetried {
        error: &'a dyn Display,
    },
    PluginSwapped {
        label: &'a str,
        generation: u64,
        source: &'a str,
    },
    SwapRefused {
        name: &'a str,
        running: &'a str,
        source: &'a str,
        error: &'a dyn Display,
    },
}

impl Happened<'_> {
    /// Logs it and counts it in `metrics`.
    pub fn emit(self, metrics: &Metrics) {
        use Happened::*;
        match self {
            AdminListening { url } => {
                tracing::info!(target: "cojoin::report", %url, "admin server listening (/metrics, /healthz, /readyz, /plugins)");
            }
            JoiningGroup {
                left,
                right,
                partitions,
                group,
            } => {
                tracing::info!(target: "cojoin::report", left, right, partitions, group, "joining the group");
            }
            Assignment { left, right } => {
                metrics.update(|m| m.rebalances += 1);
                // Both topics side by side: co-partitioning is visible in the log.
                tracing::info!(target: "cojoin::report", ?left, ?right, "assignment");
            }
            TaskAssigned { task, start } => {
                metrics.update(|m| m.tasks_assigned += 1);
                tracing::info!(target: "cojoin::report", task,
                    left_offset = start[0].offset, right_offset = start[1].offset,
                    left_processed_through = ?start[0].processed_through,
                    right_processed_through = ?start[1].processed_through,
                    "task assigned");
            }
            TaskRevoked { task } => {
                metrics.update(|m| m.tasks_revoked += 1);
                tracing::info!(target: "cojoin::report", task, "task revoked; its state is dropped");
            }
            TaskHalted {
                task,
                reason,
                left,
                right,
            } => {
                metrics.update(|m| m.tasks_halted += 1);
                tracing::error!(target: "cojoin::report", task, "{reason}; pausing partition {task} of {left} and {right}");
            }
            LeftGroup => tracing::info!(target: "cojoin::report", "left the group"),
            Committed {
                partitions,
                on_revoke,
            } => {
                metrics.update(|m| m.commits += 1);
                tracing::debug!(target: "cojoin::report", partitions, on_revoke, "committed");
            }
            CommitFailed {
                partitions,
                on_revoke,
                error,
            } => {
                metrics.update(|m| m.commit_failures += 1);
                tracing::warn!(target: "cojoin::report", partitions, on_revoke,
                    "commit failed (the next one retries; a restart would replay more): {error}");
            }
            ConsumerError { error } => {
                metrics.update(|m| m.consumer_errors += 1);
                tracing::warn!(target: "cojoin::report", "consumer error: {error}");
            }
            DeliveryRetried { error } => {
                metrics.update(|m| m.delivery_retries += 1);
                tracing::warn!(target: "cojoin::report", "a delivery failed ({error}); sending it again");
            }
            PluginSwapped {
                label,
                generation,
                source,
            } => {
                metrics.update(|m| m.swaps += 1);
                tracing::info!(target: "cojoin::report", plugin = label, generation, source, "plugin swapped");
            }
            SwapRefused {
                name,
                running,
                source,
                error,
            } => {
                metrics.update(|m| m.swaps_refused += 1);
                tracing::error!(target: "cojoin::report", source, "plugin {name} refused, {running} keeps running: {error}");
            }
        }
    }
}
