//! What a host tells its operator. Each thing that happens in a host's life — the admin server
//! listening, the group protocol, joining and leaving the group, partitions revoked and assigned, a rebalance
//! done, a task assigned, waiting for its pair, revoked or halted, an
//! offset commit, a consumer error, a delivery sent again, a plugin swapped or refused — is a
//! [`Happened`], emitted once where it happens. [`Happened::emit`] writes its log line and bumps
//! its counter side by side, in one match, so a log line and its count cannot drift apart (as
//! vector's internal events do). The counters are prometheus-client's (metrics.rs): an update is
//! an atomic add, no lock.
//!
//! Per-record and per-call counts (matches, expiries, late records, dead-letter decisions, call
//! latencies) are not here: the tasks and plugin workers count those without a lock or an atomic,
//! and the run loop adds them to the metrics once per round (run/publish.rs). They are not logged one by one either, except
//! a failure, which is logged where it is decided, with the record it concerns.
//!
//! Log lines go to the `cojoin::report` target, at info unless something went wrong, so the
//! default filter (main.rs) shows exactly these.

use std::fmt::Display;

use crate::event::Side;
use crate::join::CommitPoint;
use crate::metrics::Metrics;

/// One thing that happened; see the module doc.
pub enum Happened<'a> {
    AdminListening {
        url: &'a dyn Display,
    },
    JoiningGroup {
        /// The topics the join reads, in order (internal ones for repartitioned topics).
        topics: &'a [String],
        partitions: usize,
        group: &'a str,
    },
    /// Which consumer group protocol runs, and why.
    GroupProtocol {
        protocol: &'static str,
        why: &'a str,
    },
    /// The broker was asked for the permissions the config needs: how many it granted, and
    /// those it could not tell about (none missing: a missing one stops the host).
    PermissionsChecked {
        granted: usize,
        unknown: &'a [String],
    },
    /// Partitions taken from this host, by partition number, of the left and the right topic.
    /// Per topic of the join, in order.
    PartitionsRevoked {
        by_topic: &'a [Vec<i32>],
    },
    /// Partitions given to this host (`added`), and all it holds now (`held`), per topic.
    Assignment {
        held: &'a [Vec<i32>],
        added: &'a [Vec<i32>],
    },
    /// Every held partition has its pair again: the rebalance is over for this host.
    RebalanceDone {
        took_ms: i64,
        tasks: usize,
    },
    /// A task started; `waited_ms` is how long its first half waited for the second.
    TaskAssigned {
        task: i32,
        /// Per topic of the join, in order.
        start: &'a [CommitPoint],
        waited_ms: Option<i64>,
    },
    /// One partition of a task has been held for a while without the other.
    TaskWaiting {
        task: i32,
        waited_ms: i64,
        topics: &'a [String],
    },
    TaskRevoked {
        task: i32,
    },
    /// A task's queue for one side passed its share of `memory.queue_bytes`: that partition is
    /// paused until the queue drains. Frequent under a backlog, so logged at debug; counted
    /// (`cojoin_backpressure_pauses_total`).
    QueueFull {
        task: i32,
        side: Side,
        queued: usize,
        high: usize,
    },
    /// A record larger than a task side's whole queue share (said once per host).
    LargeRecord {
        topic: &'a str,
        partition: i32,
        offset: i64,
        bytes: usize,
        share: usize,
    },
    /// A task stopped under `plugin.failure = "halt"`; its partitions are paused.
    TaskHalted {
        task: i32,
        reason: &'a str,
        topics: &'a [String],
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
    /// Exactly-once: a transaction (outputs and offsets) committed.
    TransactionCommitted {
        took: std::time::Duration,
        on_revoke: bool,
    },
    /// Exactly-once: a transaction aborted; its tasks replay from their last commit.
    TransactionAborted {
        why: &'a str,
    },
    /// Exactly-once: the transactional producer was fenced or failed for good (why) and a new one
    /// took over; its open transaction counts as aborted, its tasks replay from their last commit.
    ProducerRenewed {
        why: &'a str,
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
                topics,
                partitions,
                group,
            } => {
                // A global table join's group reads its stream alone.
                if let [stream] = topics {
                    tracing::info!(target: "cojoin::report", stream, partitions, group, "joining the group");
                    return;
                }
                let (left, right, more) = (&topics[0], &topics[1], &topics[2..]);
                if more.is_empty() {
                    tracing::info!(target: "cojoin::report", left, right, partitions, group, "joining the group");
                } else {
                    tracing::info!(target: "cojoin::report", left, right, ?more, partitions, group, "joining the group");
                }
            }
            GroupProtocol { protocol, why } => {
                metrics.set_group_protocol(protocol);
                tracing::info!(target: "cojoin::report", "group protocol {protocol}: {why}");
            }
            PermissionsChecked { granted, unknown } => {
                tracing::info!(target: "cojoin::report", ?unknown, "Kafka permissions checked: {granted} granted, none missing");
            }
            PartitionsRevoked { by_topic } => {
                if let [stream] = by_topic {
                    tracing::info!(target: "cojoin::report", ?stream, "partitions revoked");
                    return;
                }
                let (left, right, more) = (&by_topic[0], &by_topic[1], &by_topic[2..]);
                if more.is_empty() {
                    tracing::info!(target: "cojoin::report", ?left, ?right, "partitions revoked");
                } else {
                    tracing::info!(target: "cojoin::report", ?left, ?right, ?more, "partitions revoked");
                }
            }
            Assignment { held, added } => {
                // The topics side by side: co-partitioning is visible in the log. A join of
                // three topics or more gives the third and later as `more`.
                if let ([stream], [added_stream]) = (held, added) {
                    tracing::info!(target: "cojoin::report", ?stream, ?added_stream, "assignment");
                    return;
                }
                let (left, right, more) = (&held[0], &held[1], &held[2..]);
                let (added_left, added_right, added_more) = (&added[0], &added[1], &added[2..]);
                if more.is_empty() {
                    tracing::info!(target: "cojoin::report", ?left, ?right,
                        ?added_left, ?added_right, "assignment");
                } else {
                    tracing::info!(target: "cojoin::report", ?left, ?right, ?more,
                        ?added_left, ?added_right, ?added_more, "assignment");
                }
            }
            RebalanceDone { took_ms, tasks } => {
                metrics.rebalances.inc();
                metrics
                    .rebalance_seconds
                    .inc_by(took_ms.max(0) as f64 / 1000.0);
                tracing::info!(target: "cojoin::report", took_ms, tasks, "rebalance done: every held partition has its pair");
            }
            TaskAssigned {
                task,
                start,
                waited_ms,
            } => {
                metrics.tasks_assigned.inc();
                if let Some(waited) = waited_ms {
                    metrics.pair_waits.inc();
                    metrics
                        .pair_wait_seconds
                        .inc_by(waited.max(0) as f64 / 1000.0);
                }
                if let [stream] = start {
                    tracing::info!(target: "cojoin::report", task, offset = stream.offset,
                        processed_through = ?stream.processed_through,
                        waited_for_pair_ms = ?waited_ms, "task assigned");
                    return;
                }
                let more: Vec<_> = (start[2..].iter())
                    .map(|p| (p.offset, p.processed_through))
                    .collect();
                tracing::info!(target: "cojoin::report", task,
                    left_offset = start[0].offset, right_offset = start[1].offset,
                    left_processed_through = ?start[0].processed_through,
                    right_processed_through = ?start[1].processed_through,
                    more_offsets_processed_through = ?more,
                    waited_for_pair_ms = ?waited_ms,
                    "task assigned");
            }
            TaskWaiting {
                task,
                waited_ms,
                topics,
            } => {
                let partitions: Vec<String> =
                    topics.iter().map(|t| format!("{t}-{task}")).collect();
                let partitions = partitions.join(" and ");
                tracing::warn!(target: "cojoin::report", task, waited_ms,
                    "task {task}: this host holds some of {partitions} without the others; those it holds stay paused until the group moves the others here or these away (if it lasts, check that every member of the group runs the same join)");
            }
            TaskRevoked { task } => {
                metrics.tasks_revoked.inc();
                tracing::info!(target: "cojoin::report", task, "task revoked; its state is dropped");
            }
            TaskHalted {
                task,
                reason,
                topics,
            } => {
                metrics.tasks_halted.inc();
                let topics = match topics {
                    [left, right] => format!("{left} and {right}"),
                    [first @ .., last] => format!("{} and {last}", first.join(", ")),
                    [] => String::new(),
                };
                tracing::error!(target: "cojoin::report", task, "{reason}; pausing partition {task} of {topics}");
            }
            QueueFull {
                task,
                side,
                queued,
                high,
            } => {
                metrics.backpressure_pauses.inc();
                tracing::debug!(target: "cojoin::report", task, ?side, queued, high,
                    "queue full: pausing this side's partition until the task drains it");
            }
            LargeRecord {
                topic,
                partition,
                offset,
                bytes,
                share,
            } => {
                tracing::warn!(target: "cojoin::report",
                    "record {topic}-{partition}@{offset} takes {bytes} bytes, more than a task side's \
                     queue share of {share} bytes (memory.queue_bytes less prefetch and polled-ahead, \
                     over tasks and sides): its partition pauses after every such record; raise \
                     memory.queue_bytes");
            }
            LeftGroup => tracing::info!(target: "cojoin::report", "left the group"),
            Committed {
                partitions,
                on_revoke,
            } => {
                metrics.commits.inc();
                tracing::debug!(target: "cojoin::report", partitions, on_revoke, "committed");
            }
            CommitFailed {
                partitions,
                on_revoke,
                error,
            } => {
                metrics.commit_failures.inc();
                tracing::warn!(target: "cojoin::report", partitions, on_revoke,
                    "commit failed (the next one retries; a restart would replay more): {error}");
            }
            TransactionCommitted { took, on_revoke } => {
                // A transaction commits the input offsets too: it is the commit under
                // exactly-once, counted in cojoin_commits_total as in at-least-once (first, so
                // that a scrape never sees more transactions committed than commits).
                metrics.commits.inc();
                metrics.transactions_committed.inc();
                metrics
                    .transaction_commit_seconds
                    .inc_by(took.as_secs_f64());
                tracing::debug!(target: "cojoin::report", took_ms = took.as_millis() as u64, on_revoke, "transaction committed");
            }
            TransactionAborted { why } => {
                metrics.commit_failures.inc();
                metrics.transactions_aborted.inc();
                tracing::warn!(target: "cojoin::report", "transaction aborted, its outputs discarded; every task replays from its last commit: {why}");
            }
            ProducerRenewed { why } => {
                metrics.commit_failures.inc();
                metrics.transactions_aborted.inc();
                tracing::warn!(target: "cojoin::report", "transactional producer renewed: {why}; its transaction's outputs are discarded, every task replays from its last commit");
            }
            ConsumerError { error } => {
                metrics.consumer_errors.inc();
                // The same error is returned by poll after poll while a broker is away.
                if let Some(said) = crate::quiet::said(&format!("consumer error {error}"), || {
                    format!("consumer error: {error}")
                }) {
                    tracing::warn!(target: "cojoin::report", "{said}");
                }
            }
            DeliveryRetried { error } => {
                metrics.delivery_retries.inc();
                tracing::warn!(target: "cojoin::report", "a delivery failed ({error}); sending it again");
            }
            PluginSwapped {
                label,
                generation,
                source,
            } => {
                metrics.plugin_swaps.inc();
                tracing::info!(target: "cojoin::report", plugin = label, generation, source, "plugin swapped");
            }
            SwapRefused {
                name,
                running,
                source,
                error,
            } => {
                metrics.plugin_swaps_refused.inc();
                tracing::error!(target: "cojoin::report", source, "plugin {name} refused, {running} keeps running: {error}");
            }
        }
    }
}
