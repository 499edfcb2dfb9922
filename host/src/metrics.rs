//! What a running host reports on `/metrics`, and its exposition in the OpenMetrics text format
//! (by prometheus-client, from a snapshot at scrape time).
//!
//! The host loop owns the hot counters (task counters, per-call latencies) and publishes a snapshot
//! here once per round; the admin server only reads. So the hot path takes no lock per record.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::NoLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::event::FailureKind;
use crate::task::TaskCounters;

/// Upper bounds (seconds) of the plugin call latency histogram: 5 µs to 1 s.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Calls of one plugin version: a latency histogram and failures by kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallStats {
    /// Count per bucket of `LATENCY_BUCKETS` (not cumulative), plus one for above the last.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    pub count: u64,
    pub sum_seconds: f64,
    pub failures: BTreeMap<FailureKind, u64>,
    /// Instances replaced because they had grown past their recycling size (not failures).
    pub recycles: u64,
}

impl CallStats {
    pub fn observe(&mut self, took: Duration, failure: Option<FailureKind>) {
        let s = took.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_seconds += s;
        if let Some(kind) = failure {
            *self.failures.entry(kind).or_default() += 1;
        }
    }

    pub fn add(&mut self, other: &CallStats) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
        for (kind, n) in &other.failures {
            *self.failures.entry(*kind).or_default() += n;
        }
        self.recycles += other.recycles;
    }

    /// The latency below which `q` (0..1) of the calls fall, as the bucket's upper bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }
}

/// State held by one task, and how far behind its partitions are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// Records behind the high watermark, per side (left, right), when known.
    pub lag: [Option<i64>; 2],
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Records consumed per topic.
    pub consumed: BTreeMap<String, u64>,
    /// Counters summed over every task this host has run, revoked ones included.
    pub counters: TaskCounters,
    /// Plugin records the broker acknowledged.
    pub outputs_acknowledged: u64,
    /// Dead letters the broker acknowledged.
    pub dead_letters_acknowledged: u64,
    /// Offset commits the broker accepted, and those that failed.
    pub commits: u64,
    pub commit_failures: u64,
    pub tasks: BTreeMap<i32, TaskGauges>,
    /// Per plugin version label (`name@sha-prefix`).
    pub calls: BTreeMap<String, CallStats>,
    pub swaps: u64,
    pub swaps_refused: u64,
    pub rebalances: u64,
    /// Exactly-once: transactions committed (and the seconds their commits took) and aborted.
    pub transactions_committed: u64,
    pub transaction_commit_seconds: f64,
    pub transactions_aborted: u64,
    /// This host's member id in the group, as of its last assignment.
    pub member_id: Option<String>,
    /// The consumer group protocol running (`consumer` or `classic`), once chosen.
    pub group_protocol: Option<&'static str>,
    /// Seconds from the first partition moved until every held partition had its pair, summed
    /// over `rebalances`.
    pub rebalance_seconds: f64,
    /// Tasks whose first partition waited for the second, and the seconds they waited.
    pub pair_waits: u64,
    pub pair_wait_seconds: f64,
    /// Tasks of which this host holds one partition but not the other (paused).
    pub tasks_waiting: u64,
    /// Tasks this host started, dropped on revoke, and halted (`plugin.failure = "halt"`).
    pub tasks_assigned: u64,
    pub tasks_revoked: u64,
    pub tasks_halted: u64,
    /// Errors the consumer reported (a broker away, a partition's leader moving).
    pub consumer_errors: u64,
    /// Deliveries that failed for a reason that may pass and were sent again.
    pub delivery_retries: u64,
    /// Processing has started on an assignment (for `/readyz`).
    pub processing: bool,
    /// The repartition step (kafka/repartitioner.rs): records written re-keyed to an internal
    /// topic, dead-lettered or dropped for lack of a join key (all acknowledged and committed),
    /// and records held for its timestamp merge now.
    pub repartitioned: u64,
    pub repartition_dead_letters: u64,
    pub repartition_dropped: u64,
    pub repartition_held: u64,
    /// Since when (Unix ms) every batch of the repartition step has failed; 0 while it works.
    /// `/readyz` and `/healthz` fail when it lasts (admin/mod.rs).
    pub repartition_failing_since_ms: u64,
}

/// The shared, lock-protected snapshot; written by the host loop and the swap paths, read by
/// `/metrics`.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Snapshot>,
}

impl Metrics {
    pub fn update<R>(&self, f: impl FnOnce(&mut Snapshot) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn read<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        f(&self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn render(&self) -> String {
        self.read(render)
    }
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A snapshot as prometheus-client encodes it, at scrape time.
#[derive(Debug)]
struct Scrape(Snapshot);

type Encoder<'a> = prometheus_client::encoding::DescriptorEncoder<'a>;

/// A counter family without labels. prometheus-client appends `_total` to the sample.
fn counter(e: &mut Encoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

fn gauge(e: &mut Encoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

/// A gauge family by task: name, help, and the value of a task's gauges.
type PerTask = (&'static str, &'static str, fn(&TaskGauges) -> u64);

/// A gauge that carries a fact in one label, always 1.
fn info(e: &mut Encoder<'_>, name: &str, help: &str, label: (&str, &str)) -> fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_family(&[label])?
        .encode_gauge(&1u64)
}

impl Collector for Scrape {
    fn encode(&self, mut e: Encoder<'_>) -> fmt::Result {
        let s = &self.0;
        let mut consumed = e.encode_descriptor(
            "cojoin_records_consumed",
            "Records consumed, per topic.",
            None,
            MetricType::Counter,
        )?;
        for (topic, n) in &s.consumed {
            consumed
                .encode_family(&[("topic", topic.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
        let c = &s.counters;
        for (name, help, value) in [
            ("cojoin_matches", "Pairs handed to on-match.", c.matches),
            (
                "cojoin_expiries",
                "Unmatched events handed to on-expire after their window closed.",
                c.expiries,
            ),
            (
                "cojoin_late_records",
                "Records behind stream time by more than window + grace.",
                c.late,
            ),
            (
                "cojoin_future_timestamp_records",
                "Records stamped further ahead of the host's clock than join.max_future.",
                c.future_timestamps,
            ),
            ("cojoin_null_key_records", "Records without a key.", c.null_keys),
            ("cojoin_tombstone_records", "Records without a value.", c.tombstones),
            (
                "cojoin_dead_lettered_records",
                "Records the tasks sent to the dead-letter topic (when they decided; cojoin_dead_letters_produced_total counts the broker's acknowledgements).",
                c.dead_lettered,
            ),
            (
                "cojoin_refused_outputs",
                "Plugin records not produced (a topic they may not go to, or refused by the producer or broker); their inputs are dead-lettered as output-refused.",
                c.refused_outputs,
            ),
            (
                "cojoin_replay_suppressed",
                "Outcomes not acted on again after a restart (a previous owner had).",
                c.suppressed,
            ),
            (
                "cojoin_backpressure_pauses",
                "Times a partition was paused because its task's queue passed its share of memory.queue_bytes.",
                c.pauses,
            ),
            (
                "cojoin_state_spilled_bytes",
                "Bytes of join state moved from RAM to files under state.dir (memory.state_bytes).",
                c.spilled_bytes,
            ),
            (
                "cojoin_state_read_back_bytes",
                "Bytes of spilled join state read back from disk (probes and expiries).",
                c.read_back_bytes,
            ),
            (
                "cojoin_records_produced",
                "Output and dead-letter records acknowledged by the broker.",
                s.outputs_acknowledged + s.dead_letters_acknowledged,
            ),
            (
                "cojoin_outputs_produced",
                "Plugin records acknowledged by the broker.",
                s.outputs_acknowledged,
            ),
            (
                "cojoin_dead_letters_produced",
                "Dead letters acknowledged by the broker.",
                s.dead_letters_acknowledged,
            ),
            (
                "cojoin_commits",
                "Offset commits the broker accepted (every second, on revoke and when leaving); under exactly-once, the transactions committed (they carry the offsets).",
                s.commits,
            ),
            (
                "cojoin_commit_failures",
                "Offset commits that failed (the next one retries; a restart would replay more); under exactly-once, the transactions aborted.",
                s.commit_failures,
            ),
            ("cojoin_plugin_swaps", "Plugin versions swapped in.", s.swaps),
            (
                "cojoin_repartitioned_records",
                "Records the repartition step wrote, re-keyed, to an internal topic (acknowledged, input committed).",
                s.repartitioned,
            ),
            (
                "cojoin_repartition_dead_letters",
                "Records the repartition step dead-lettered: no join key (join.null_keys = dead-letter).",
                s.repartition_dead_letters,
            ),
            (
                "cojoin_repartition_dropped",
                "Records the repartition step dropped: no join key (join.null_keys = drop).",
                s.repartition_dropped,
            ),
            (
                "cojoin_plugin_swaps_refused",
                "Plugin files or uploads refused (the running version kept).",
                s.swaps_refused,
            ),
            (
                "cojoin_rebalances",
                "Rebalances this host went through: from the first partition assigned or revoked until every held partition had its pair.",
                s.rebalances,
            ),
            (
                "cojoin_transactions_committed",
                "Exactly-once: transactions (outputs and input offsets) committed.",
                s.transactions_committed,
            ),
            (
                "cojoin_transactions_aborted",
                "Exactly-once: transactions aborted (their outputs discarded, the tasks replayed from their last commit).",
                s.transactions_aborted,
            ),
            (
                "cojoin_pair_waits",
                "Tasks whose first partition arrived before the second (the new group protocol moves partitions one at a time).",
                s.pair_waits,
            ),
            (
                "cojoin_tasks_assigned",
                "Tasks started on this host (a partition number of both topics assigned).",
                s.tasks_assigned,
            ),
            (
                "cojoin_tasks_revoked",
                "Tasks dropped, with their state, because the group moved them away.",
                s.tasks_revoked,
            ),
            (
                "cojoin_tasks_halted",
                "Tasks stopped by a plugin failure under plugin.failure = \"halt\" (their partitions paused).",
                s.tasks_halted,
            ),
            (
                "cojoin_consumer_errors",
                "Errors the consumer reported while polling (it retries on its own).",
                s.consumer_errors,
            ),
            (
                "cojoin_delivery_retries",
                "Outputs or dead letters sent again after a delivery failure that may pass.",
                s.delivery_retries,
            ),
        ] {
            counter(&mut e, name, help, value)?;
        }

        for (name, help, value) in [
            (
                "cojoin_rebalance_seconds",
                "Seconds spent in rebalances (see cojoin_rebalances_total).",
                s.rebalance_seconds,
            ),
            (
                "cojoin_transaction_commit_seconds",
                "Exactly-once: seconds spent committing transactions (see cojoin_transactions_committed_total).",
                s.transaction_commit_seconds,
            ),
            (
                "cojoin_pair_wait_seconds",
                "Seconds tasks waited for their second partition (see cojoin_pair_waits_total).",
                s.pair_wait_seconds,
            ),
        ] {
            e.encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
        if let Some(protocol) = s.group_protocol {
            info(
                &mut e,
                "cojoin_group_protocol",
                "The consumer group protocol this host runs (consumer: KIP-848; classic: eager range), as a label; always 1.",
                ("protocol", protocol),
            )?;
        }
        if let Some(member) = &s.member_id {
            info(
                &mut e,
                "cojoin_group_member",
                "This host's member id in the consumer group, as a label; always 1.",
                ("member_id", member),
            )?;
        }
        gauge(
            &mut e,
            "cojoin_tasks_waiting_for_pair",
            "Tasks of which this host holds one partition without the other (that half paused).",
            s.tasks_waiting,
        )?;
        gauge(
            &mut e,
            "cojoin_assigned_tasks",
            "Tasks (partition numbers) held.",
            s.tasks.len() as u64,
        )?;
        let per_task: [PerTask; 6] = [
            (
                "cojoin_state_events",
                "Events held in join state, per task.",
                |t| t.events as u64,
            ),
            (
                "cojoin_state_bytes",
                "Bytes held in join state (in RAM and on disk), per task.",
                |t| t.bytes as u64,
            ),
            (
                "cojoin_state_ram_bytes",
                "Bytes of join state segments in RAM, per task (memory.state_bytes bounds their sum).",
                |t| t.ram_bytes as u64,
            ),
            (
                "cojoin_state_disk_bytes",
                "Bytes of join state spilled to files under state.dir, per task.",
                |t| t.disk_bytes as u64,
            ),
            (
                "cojoin_queue_bytes",
                "Bytes of records consumed and not processed yet, per task (memory.queue_bytes bounds their sum).",
                |t| t.queued_bytes as u64,
            ),
            (
                "cojoin_queue_peak_bytes",
                "The most bytes of records a task's queue held at once since it started.",
                |t| t.queued_peak_bytes as u64,
            ),
        ];
        for (name, help, value) in per_task {
            let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (p, t) in &s.tasks {
                let task = p.to_string();
                family
                    .encode_family(&[("task", task.as_str())])?
                    .encode_gauge(&value(t))?;
            }
        }
        gauge(
            &mut e,
            "cojoin_repartition_held_records",
            "Records the repartition step has read and holds for its timestamp merge.",
            s.repartition_held,
        )?;
        gauge(
            &mut e,
            "cojoin_repartition_failing_seconds",
            "Seconds every batch of the repartition step has failed for (0 while it works).",
            match s.repartition_failing_since_ms {
                0 => 0,
                since => crate::clock::now_ms().saturating_sub(since) / 1000,
            },
        )?;
        gauge(
            &mut e,
            "cojoin_paused_partitions",
            "Partitions paused because their task's queue passed its share of memory.queue_bytes.",
            s.tasks.values().map(|t| t.paused as u64).sum(),
        )?;
        let mut lag = e.encode_descriptor(
            "cojoin_consumer_lag",
            "Records behind the high watermark, per task and side.",
            None,
            MetricType::Gauge,
        )?;
        for (p, t) in &s.tasks {
            let task = p.to_string();
            for (side, behind) in ["left", "right"].into_iter().zip(t.lag) {
                if let Some(behind) = behind {
                    lag.encode_family(&[("task", task.as_str()), ("side", side)])?
                        .encode_gauge(&behind)?;
                }
            }
        }

        let mut seconds = e.encode_descriptor(
            "cojoin_plugin_call_seconds",
            "Plugin call latency, per plugin version.",
            None,
            MetricType::Histogram,
        )?;
        for (version, stats) in &s.calls {
            // Per bucket, not cumulative; the last, above every bound, is +Inf.
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(stats.buckets)
                .collect();
            seconds
                .encode_family(&[("plugin", version.as_str())])?
                .encode_histogram::<NoLabelSet>(stats.sum_seconds, stats.count, &buckets, None)?;
        }
        let mut failures = e.encode_descriptor(
            "cojoin_plugin_call_failures",
            "Failed plugin calls, per plugin version and kind (plugin-error, timeout, memory, crash, unavailable).",
            None,
            MetricType::Counter,
        )?;
        for (version, stats) in &s.calls {
            for (kind, n) in &stats.failures {
                failures
                    .encode_family(&[("plugin", version.as_str()), ("kind", kind.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        let mut recycles = e.encode_descriptor(
            "cojoin_plugin_instance_recycles",
            "Plugin instances replaced between calls because their memory had grown past the recycling size (64 MiB of growth, or 3/4 of the room under plugin.memory_mib); not failures.",
            None,
            MetricType::Counter,
        )?;
        for (version, stats) in &s.calls {
            recycles
                .encode_family(&[("plugin", version.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(&stats.recycles, None)?;
        }
        Ok(())
    }
}

/// The snapshot in the OpenMetrics text format ([`CONTENT_TYPE`]), encoded by prometheus-client.
pub fn render(s: &Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(s.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_their_bucket_and_quantiles_read_the_bounds() {
        let mut stats = CallStats::default();
        for us in [3, 8, 8, 40, 2_000_000] {
            stats.observe(Duration::from_micros(us), None);
        }
        stats.observe(Duration::from_micros(8), Some(FailureKind::Crash));
        assert_eq!(&stats.buckets[..4], &[1, 3, 0, 1]);
        assert_eq!(
            stats.buckets[LATENCY_BUCKETS.len()],
            1,
            "2 s is above the last bound"
        );
        assert_eq!(stats.quantile(0.5), Some(0.000_01));
        assert_eq!(stats.quantile(0.99), Some(f64::INFINITY));
        assert_eq!(stats.failures.get(&FailureKind::Crash), Some(&1));
        assert_eq!(CallStats::default().quantile(0.5), None);
    }

    #[test]
    fn the_text_format_has_cumulative_buckets_and_escaped_labels() {
        let mut s = Snapshot::default();
        s.consumed.insert("orders".into(), 7);
        s.counters.matches = 3;
        s.tasks.insert(
            2,
            TaskGauges {
                events: 4,
                bytes: 400,
                queued_bytes: 1_000,
                paused: 1,
                lag: [Some(5), None],
                ..TaskGauges::default()
            },
        );
        let mut stats = CallStats::default();
        stats.observe(Duration::from_micros(3), None);
        stats.observe(Duration::from_micros(40), Some(FailureKind::Timeout));
        s.calls.insert("odd\"name@abc".into(), stats);
        let text = render(&s);
        for line in [
            "cojoin_records_consumed_total{topic=\"orders\"} 7",
            "cojoin_matches_total 3",
            "cojoin_assigned_tasks 1",
            "cojoin_state_events{task=\"2\"} 4",
            "cojoin_state_bytes{task=\"2\"} 400",
            "cojoin_queue_bytes{task=\"2\"} 1000",
            "cojoin_paused_partitions 1",
            "cojoin_consumer_lag{task=\"2\",side=\"left\"} 5",
            "cojoin_plugin_call_seconds_bucket{le=\"0.000005\",plugin=\"odd\\\"name@abc\"} 1",
            "cojoin_plugin_call_seconds_bucket{le=\"0.00005\",plugin=\"odd\\\"name@abc\"} 2",
            "cojoin_plugin_call_seconds_bucket{le=\"+Inf\",plugin=\"odd\\\"name@abc\"} 2",
            "cojoin_plugin_call_seconds_count{plugin=\"odd\\\"name@abc\"} 2",
            "cojoin_plugin_call_failures_total{plugin=\"odd\\\"name@abc\",kind=\"timeout\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("side=\"right\""), "unknown lag is left out");
    }

    #[test]
    fn the_readme_lists_every_metric_family_the_host_exports() {
        let readme = include_str!("../../README.md");
        let page = render(&Snapshot::default());
        let missing: Vec<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|family| {
                // Listed as the family or as its counter (`_total`); labels may follow.
                ![
                    format!("`{family}`"),
                    format!("`{family}{{"),
                    format!("`{family}_total"),
                ]
                .iter()
                .any(|spelled| readme.contains(spelled.as_str()))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "README's /metrics list lacks {missing:?}"
        );
    }

    #[test]
    fn the_grafana_dashboard_queries_only_metrics_the_host_exports() {
        let dashboard = include_str!("../../examples/grafana/cojoin-dashboard.json");
        let page = render(&Snapshot::default());
        let families: Vec<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut queried = 0;
        for (i, _) in dashboard.match_indices("cojoin_") {
            let name: String = dashboard[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            // The dashboard's uid and title are "cojoin"; metric names go on past the prefix.
            if name == "cojoin_" {
                continue;
            }
            // OpenMetrics names a counter's family without its `_total`, a histogram's without
            // `_bucket`.
            let family = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_total"))
                .unwrap_or(&name);
            assert!(
                families.contains(&family),
                "the dashboard queries {name}, which /metrics does not export"
            );
            queried += 1;
        }
        assert!(queried >= 10, "only {queried} metric queries found");
    }
}
