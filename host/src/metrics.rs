//! What a running host reports on `/metrics`, in the OpenMetrics text format.
//!
//! Every metric is a prometheus-client counter, gauge or family, declared once in the table of
//! [`Metrics`] (field, type, name, help) and registered with one `Registry`; `/metrics` is that
//! registry encoded. A new metric is one line of the table plus the line that updates it. The
//! handles share their values (`Arc`s of atomics), so whoever holds `&Metrics` updates one where
//! it happens, without a lock:
//! - the things that happen in a host's life (a rebalance, a commit, a swap) where they are
//!   reported (report.rs), and the repartition step's counts after each batch;
//! - per-record and per-call counts once per round: the tasks and plugin workers count with plain
//!   numbers (a record or a call costs no atomic), and the run loop adds the round's deltas
//!   (run/publish.rs), with the gauges (state held, queues, lag) set at the same time.
//!
//! There is no snapshot: a scrape reads each value as it is, so one taken while the loop
//! publishes may see part of a round (publish.rs adds causes before effects, so that a scrape
//! never sees an output acknowledged before the match that made it).
//!
//! Two metric types are ours: histograms fed a round at a time ([`Histogram`], for plugin calls
//! and match latency: prometheus-client's takes a lock per observation and cannot take a round's
//! buckets at once) and the one value
//! computed at scrape time, the seconds the repartition step has been failing for
//! ([`SecondsSince`]: it must go on rising when the step hangs).
//!
//! Label sets are structs (their fields are the label names, in order). prometheus-client writes
//! no descriptor for a family without a sample yet (a host with no task has no `cojoin_state_*`
//! lines), and appends `_total` to a counter's samples and `.` to each help text.

mod calls;
mod histogram;
mod since;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::event::FailureKind;

pub use calls::{CallLatency, CallStats, LATENCY_BUCKETS};
pub use histogram::{Bounds, Counts, Histogram};
pub use since::SecondsSince;

/// Upper bounds (seconds) of `cojoin_match_latency_seconds`: 1 ms to 60 s.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MatchBounds;

impl Bounds for MatchBounds {
    const UPPER: &'static [f64] = &[
        0.001, 0.002_5, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ];
}

/// A counter of seconds (a sum of durations).
pub type Seconds = Counter<f64, AtomicU64>;

/// The label of a per-topic family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Topic {
    pub topic: String,
}

/// The label of a per-task family (a task is a partition number).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Task {
    pub task: i32,
}

/// A task and one of its sides (`left`, `right`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskSide {
    pub task: i32,
    pub side: &'static str,
}

/// A plugin version, labelled `name@sha-prefix`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Plugin {
    pub plugin: String,
}

/// A plugin version and a kind of failure ([`FailureKind::as_str`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginFailure {
    pub plugin: String,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Protocol {
    pub protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Member {
    pub member_id: String,
}

/// Declares [`Metrics`]: a field per metric, each registered under its name and help when the
/// metrics are made. Help texts are written without their final period (the registry adds it).
macro_rules! metrics {
    ($($field:ident: $type:ty = $name:literal, $help:literal;)*) => {
        /// Every metric this host exports, and the registry `/metrics` encodes them from.
        pub struct Metrics {
            $(#[doc = concat!("`", $name, "`: ", $help, ".")] pub $field: $type,)*
            registry: Registry,
        }

        impl Default for Metrics {
            fn default() -> Self {
                let mut registry = Registry::default();
                $(
                    let $field = <$type>::default();
                    registry.register($name, $help, $field.clone());
                )*
                Metrics { $($field,)* registry }
            }
        }
    };
}

metrics! {
    records_consumed: Family<Topic, Counter> = "cojoin_records_consumed", "Records consumed, per topic";
    matches: Counter = "cojoin_matches", "Pairs handed to on-match";
    expiries: Counter = "cojoin_expiries", "Unmatched events handed to on-expire after their window closed";
    late_records: Counter = "cojoin_late_records", "Records behind stream time by more than window + grace";
    future_timestamp_records: Counter = "cojoin_future_timestamp_records", "Records stamped further ahead of the host's clock than join.max_future";
    null_key_records: Counter = "cojoin_null_key_records", "Records without a key";
    tombstone_records: Counter = "cojoin_tombstone_records", "Records without a value";
    dead_lettered_records: Counter = "cojoin_dead_lettered_records", "Records the tasks sent to the dead-letter topic (when they decided; cojoin_dead_letters_produced_total counts the broker's acknowledgements)";
    refused_outputs: Counter = "cojoin_refused_outputs", "Plugin records not produced (a topic they may not go to, or refused by the producer or broker); their inputs are dead-lettered as output-refused";
    replay_suppressed: Counter = "cojoin_replay_suppressed", "Outcomes not acted on again after a restart (a previous owner had)";
    backpressure_pauses: Counter = "cojoin_backpressure_pauses", "Times a partition was paused because its task's queue passed its share of memory.queue_bytes";
    state_spilled_bytes: Counter = "cojoin_state_spilled_bytes", "Bytes of join state moved from RAM to files under state.dir (memory.state_bytes)";
    state_read_back_bytes: Counter = "cojoin_state_read_back_bytes", "Bytes of spilled join state read back from disk (probes and expiries)";
    table_updates: Counter = "cojoin_table_updates", "Table joins: table records applied (upserts and deletions, restores included)";
    table_misses: Counter = "cojoin_table_misses", "Table joins: stream records whose key had no row at their timestamp (inner: not handed over; left: handed to on-expire)";
    table_too_old: Counter = "cojoin_table_too_old", "Table joins, versioned: stream records and table updates stamped before stream time - join.table.history (records joined with no row, updates dropped)";
    table_restored_records: Counter = "cojoin_table_restored_records", "Table joins: table records read by restores (a task's table partition from its beginning to its end offset when the task started)";
    table_restore_seconds: Seconds = "cojoin_table_restore_seconds", "Table joins: seconds restores took, from a task's start to its table read to that end offset (see cojoin_table_restored_records_total)";
    records_produced: Counter = "cojoin_records_produced", "Output and dead-letter records acknowledged by the broker";
    outputs_produced: Counter = "cojoin_outputs_produced", "Plugin records acknowledged by the broker";
    dead_letters_produced: Counter = "cojoin_dead_letters_produced", "Dead letters acknowledged by the broker";
    commits: Counter = "cojoin_commits", "Offset commits the broker accepted (every second, on revoke and when leaving); under exactly-once, the transactions committed (they carry the offsets)";
    commit_failures: Counter = "cojoin_commit_failures", "Offset commits that failed (the next one retries; a restart would replay more); under exactly-once, the transactions aborted";
    plugin_swaps: Counter = "cojoin_plugin_swaps", "Plugin versions swapped in";
    repartitioned_records: Counter = "cojoin_repartitioned_records", "Records the repartition step wrote, re-keyed, to an internal topic (acknowledged, input committed)";
    repartition_dead_letters: Counter = "cojoin_repartition_dead_letters", "Records the repartition step dead-lettered: no join key (join.null_keys = dead-letter)";
    repartition_dropped: Counter = "cojoin_repartition_dropped", "Records the repartition step dropped: no join key (join.null_keys = drop)";
    plugin_swaps_refused: Counter = "cojoin_plugin_swaps_refused", "Plugin files or uploads refused (the running version kept)";
    rebalances: Counter = "cojoin_rebalances", "Rebalances this host went through: from the first partition assigned or revoked until every held partition had its pair";
    transactions_committed: Counter = "cojoin_transactions_committed", "Exactly-once: transactions (outputs and input offsets) committed";
    transactions_aborted: Counter = "cojoin_transactions_aborted", "Exactly-once: transactions aborted (their outputs discarded, the tasks replayed from their last commit)";
    pair_waits: Counter = "cojoin_pair_waits", "Tasks whose first partition arrived before the second (the new group protocol moves partitions one at a time)";
    tasks_assigned: Counter = "cojoin_tasks_assigned", "Tasks started on this host (a partition number of both topics assigned)";
    tasks_revoked: Counter = "cojoin_tasks_revoked", "Tasks dropped, with their state, because the group moved them away";
    tasks_halted: Counter = "cojoin_tasks_halted", "Tasks stopped by a plugin failure under plugin.failure = \"halt\" (their partitions paused)";
    consumer_errors: Counter = "cojoin_consumer_errors", "Errors the consumer reported while polling (it retries on its own)";
    end_offsets_asked: Counter = "cojoin_end_offsets_asked", "Times a task asked the broker for the end of a side it would go on without (the consumer's cached end said it was caught up)";
    end_offsets_behind: Counter = "cojoin_end_offsets_behind", "Of those, times the broker held records the cached end did not show (the task waited for them instead of making them late)";
    delivery_retries: Counter = "cojoin_delivery_retries", "Outputs or dead letters sent again after a delivery failure that may pass";
    rebalance_seconds: Seconds = "cojoin_rebalance_seconds", "Seconds spent in rebalances (see cojoin_rebalances_total)";
    transaction_commit_seconds: Seconds = "cojoin_transaction_commit_seconds", "Exactly-once: seconds spent committing transactions (see cojoin_transactions_committed_total)";
    pair_wait_seconds: Seconds = "cojoin_pair_wait_seconds", "Seconds tasks waited for their second partition (see cojoin_pair_waits_total)";
    group_protocol: Family<Protocol, Gauge> = "cojoin_group_protocol", "The consumer group protocol this host runs (consumer: KIP-848; classic: eager range), as a label; always 1";
    group_member: Family<Member, Gauge> = "cojoin_group_member", "This host's member id in the consumer group, as a label; always 1";
    tasks_waiting_for_pair: Gauge = "cojoin_tasks_waiting_for_pair", "Tasks of which this host holds one partition without the other (that half paused)";
    assigned_tasks: Gauge = "cojoin_assigned_tasks", "Tasks (partition numbers) held";
    table_rows: Gauge = "cojoin_table_rows", "A global table's rows (keys with a value), in this host's view of the whole table";
    table_bytes: Gauge = "cojoin_table_bytes", "Bytes a global table takes in this host (in RAM and on disk; memory.state_bytes bounds the RAM)";
    state_events: Family<Task, Gauge> = "cojoin_state_events", "Events held in join state, per task (a table join: its table's rows)";
    state_bytes: Family<Task, Gauge> = "cojoin_state_bytes", "Bytes held in join state (in RAM and on disk), per task (a table join: its table's)";
    state_ram_bytes: Family<Task, Gauge> = "cojoin_state_ram_bytes", "Bytes of join state segments in RAM, per task (memory.state_bytes bounds their sum)";
    state_disk_bytes: Family<Task, Gauge> = "cojoin_state_disk_bytes", "Bytes of join state spilled to files under state.dir, per task";
    task_waited_seconds: Family<Task, Gauge<f64, AtomicU64>> = "cojoin_task_waited_seconds", "Seconds a task's queued records waited for a side since it started on this host (join.max_idle for a caught-up side, a side's backlog on the broker, the broker's answer, replay, a paused side); the latency a task adds beside the plugin and the producer";
    match_latency: Histogram<MatchBounds> = "cojoin_match_latency_seconds", "Per output: from the later input's timestamp (its producer's clock, or the broker's append time) to the broker acknowledging the output (under exactly-once, before its transaction commits); needs clocks in step";
    queue_bytes: Family<Task, Gauge> = "cojoin_queue_bytes", "Bytes of records consumed and not processed yet, per task (memory.queue_bytes bounds their sum)";
    queue_peak_bytes: Family<Task, Gauge> = "cojoin_queue_peak_bytes", "The most bytes of records a task's queue held at once since it started";
    repartition_held_records: Gauge = "cojoin_repartition_held_records", "Records the repartition step has read and holds for its timestamp merge";
    repartition_failing_seconds: SecondsSince = "cojoin_repartition_failing_seconds", "Seconds every batch of the repartition step has failed for (0 while it works)";
    paused_partitions: Gauge = "cojoin_paused_partitions", "Partitions paused because their task's queue passed its share of memory.queue_bytes";
    consumer_lag: Family<TaskSide, Gauge> = "cojoin_consumer_lag", "Records behind the high watermark, per task and side";
    plugin_call_seconds: Family<Plugin, CallLatency> = "cojoin_plugin_call_seconds", "Plugin call latency, per plugin version";
    plugin_call_failures: Family<PluginFailure, Counter> = "cojoin_plugin_call_failures", "Failed plugin calls, per plugin version and kind (plugin-error, timeout, memory, crash, unavailable)";
    plugin_instance_recycles: Family<Plugin, Counter> = "cojoin_plugin_instance_recycles", "Plugin instances replaced between calls because their memory had grown past the recycling size (64 MiB of growth, or 3/4 of the room under plugin.memory_mib); not failures";
}

/// State held by one task, and how far behind its partitions are: the per-task gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskGauges {
    pub events: usize,
    pub bytes: usize,
    /// Of the join state: segment bytes in RAM and spilled to disk.
    pub ram_bytes: usize,
    pub disk_bytes: usize,
    /// Bytes of records queued, and partitions paused for backpressure.
    pub queued_bytes: usize,
    pub queued_peak_bytes: usize,
    pub paused: usize,
    /// Records behind the high watermark, per side (left, right, third, …), when known.
    pub lag: Vec<Option<i64>>,
    /// Milliseconds records waited for a side since the task started here.
    pub waited_ms: i64,
}

/// Every failure kind, for [`Metrics::plugin_calls`] (the match below makes a new kind a compile
/// error here rather than a count `/plugins` misses).
const FAILURE_KINDS: [FailureKind; 5] = [
    FailureKind::PluginError,
    FailureKind::Timeout,
    FailureKind::Memory,
    FailureKind::Crash,
    FailureKind::Unavailable,
];
const _: fn(FailureKind) = |kind| match kind {
    FailureKind::PluginError
    | FailureKind::Timeout
    | FailureKind::Memory
    | FailureKind::Crash
    | FailureKind::Unavailable => {}
};

/// The `side` label of a topic's place in the join: a two-topic join's left and right, then the
/// third and later topics of `join.topics`.
const SIDES: [&str; crate::event::MAX_TOPICS] = [
    "left", "right", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
];

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Metrics {
    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]), encoded by
    /// prometheus-client.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding into a String cannot fail");
        out
    }

    /// Processing has started on an assignment (for `/readyz`): a task is held.
    pub fn processing(&self) -> bool {
        self.assigned_tasks.get() > 0
    }

    /// A fact carried in the one label of an info-like family: it replaces the one before.
    fn say<S: Clone + std::hash::Hash + Eq>(family: &Family<S, Gauge>, fact: Option<S>) {
        family.clear();
        if let Some(fact) = fact {
            family.get_or_create(&fact).set(1);
        }
    }

    pub fn set_group_protocol(&self, protocol: &'static str) {
        Self::say(&self.group_protocol, Some(Protocol { protocol }));
    }

    /// This host's member id in the group, as of its last assignment.
    pub fn set_member(&self, member_id: Option<String>) {
        Self::say(
            &self.group_member,
            member_id.map(|member_id| Member { member_id }),
        );
    }

    /// The per-task families, with a task's value in each.
    fn per_task(&self, t: &TaskGauges) -> [(&Family<Task, Gauge>, usize); 6] {
        [
            (&self.state_events, t.events),
            (&self.state_bytes, t.bytes),
            (&self.state_ram_bytes, t.ram_bytes),
            (&self.state_disk_bytes, t.disk_bytes),
            (&self.queue_bytes, t.queued_bytes),
            (&self.queue_peak_bytes, t.queued_peak_bytes),
        ]
    }

    /// A held task's gauges; a side whose lag is unknown is left out.
    pub fn set_task(&self, task: i32, gauges: &TaskGauges) {
        for (family, value) in self.per_task(gauges) {
            family.get_or_create(&Task { task }).set(value as i64);
        }
        self.task_waited_seconds
            .get_or_create(&Task { task })
            .set(gauges.waited_ms as f64 / 1000.0);
        for (side, &lag) in SIDES.into_iter().zip(&gauges.lag) {
            let labels = TaskSide { task, side };
            match lag {
                Some(behind) => {
                    self.consumer_lag.get_or_create(&labels).set(behind);
                }
                None => {
                    self.consumer_lag.remove(&labels);
                }
            }
        }
    }

    /// A task no longer held: its gauges go.
    pub fn forget_task(&self, task: i32) {
        for (family, _) in self.per_task(&TaskGauges::default()) {
            family.remove(&Task { task });
        }
        self.task_waited_seconds.remove(&Task { task });
        for side in SIDES {
            self.consumer_lag.remove(&TaskSide { task, side });
        }
    }

    /// Adds the calls a plugin version answered (labelled `label`) since they were last added.
    pub fn add_calls(&self, label: &str, stats: &CallStats) {
        let plugin = Plugin {
            plugin: label.to_owned(),
        };
        self.plugin_call_seconds
            .get_or_create(&plugin)
            .add(&stats.latency);
        self.plugin_instance_recycles
            .get_or_create(&plugin)
            .inc_by(stats.recycles);
        for (kind, n) in &stats.failures {
            self.plugin_call_failures
                .get_or_create(&PluginFailure {
                    plugin: label.to_owned(),
                    kind: kind.as_str(),
                })
                .inc_by(*n);
        }
    }

    /// The calls a plugin version answered and its failures by kind (for `/plugins`).
    pub fn plugin_calls(&self, label: &str) -> (u64, BTreeMap<&'static str, u64>) {
        let plugin = Plugin {
            plugin: label.to_owned(),
        };
        let calls = self
            .plugin_call_seconds
            .get(&plugin)
            .map_or(0, |latency| latency.count());
        let failures = FAILURE_KINDS
            .into_iter()
            .filter_map(|kind| {
                let labels = PluginFailure {
                    plugin: label.to_owned(),
                    kind: kind.as_str(),
                };
                Some((kind.as_str(), self.plugin_call_failures.get(&labels)?.get()))
            })
            .collect();
        (calls, failures)
    }
}

#[cfg(test)]
mod tests;
