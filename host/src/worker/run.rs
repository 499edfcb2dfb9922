//! `cojoin run`: one consumer subscribed to both joined topics with the range assignor, one
//! `PartitionTask` per assigned partition number, the plugin, an idempotent producer for outputs and
//! dead letters, and commits that never pass what a restart needs.
//!
//! Everything runs on the calling thread: poll, process, produce and wait for acknowledgements,
//! then commit. Rebalance callbacks run inside `poll`, between processing rounds, so the commit
//! points they commit on revoke are always consistent.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::Config;
use crate::event::{Event, Side};
use crate::join::CommitPoint;
use crate::kafka::assignment;
use crate::metrics::{Metrics, TaskGauges};
use crate::plugin::PluginRegistry;
use crate::task::TaskCounters;
use crate::task::{pool, PartitionTask};
use crate::worker::action::MeteredWorker;
use crate::worker::output::Outputs;
use crate::worker::replay::task_policy;

/// How often commit points are committed while running (also on revoke and shutdown).
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(10);
/// How often consumer lag is recomputed for the metrics.
const LAG_INTERVAL: Duration = Duration::from_secs(2);

/// The high watermark librdkafka last saw in a fetch response. rdkafka 0.38 wraps only the
/// blocking `fetch_watermarks`, so this calls `rd_kafka_get_watermark_offsets` itself.
fn cached_high_watermark(consumer: &BaseConsumer<JoinContext>, topic: &str, p: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer lives as long as `consumer`; the out-pointers are valid locals.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            p,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// Records behind the high watermark per task and side, from the consumer's cached watermarks
/// (no broker round trip) and its positions.
fn lag_of(
    consumer: &BaseConsumer<JoinContext>,
    left: &str,
    right: &str,
    tasks: impl Iterator<Item = i32>,
) -> HashMap<i32, [Option<i64>; 2]> {
    let Ok(positions) = consumer.position() else {
        return HashMap::new();
    };
    let lag = |topic: &str, p: i32| -> Option<i64> {
        let high = cached_high_watermark(consumer, topic, p)?;
        match positions.find_partition(topic, p)?.offset() {
            Offset::Offset(pos) => Some((high - pos).max(0)),
            _ => None,
        }
    };
    tasks.map(|p| (p, [lag(left, p), lag(right, p)])).collect()
}

/// What the rebalance callbacks and the loop share. Locked only briefly, never across I/O other
/// than the revoke commit (which must happen before the partitions go).
#[derive(Default)]
struct Shared {
    points: HashMap<(String, i32), CommitPoint>,
    assigned: Option<Vec<(String, i32)>>,
    revoked: Vec<(String, i32)>,
}

struct JoinContext {
    shared: Arc<Mutex<Shared>>,
}

impl ClientContext for JoinContext {}

fn commit_list(
    points: impl IntoIterator<Item = ((String, i32), CommitPoint)>,
) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), point) in points {
        let mut elem = tpl.add_partition(&topic, partition);
        let _ = elem.set_offset(Offset::Offset(point.offset));
        elem.set_metadata(point.metadata());
    }
    tpl
}

impl ConsumerContext for JoinContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            let revoked: Vec<(String, i32)> = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_owned(), e.partition()))
                .collect();
            let points = revoked
                .iter()
                .filter_map(|tp| shared.points.remove(tp).map(|p| (tp.clone(), p)));
            let commit = commit_list(points);
            if commit.count() > 0 {
                match consumer.commit(&commit, CommitMode::Sync) {
                    Ok(()) => tracing::info!(partitions = commit.count(), "committed on revoke"),
                    Err(e) => {
                        tracing::warn!("commit on revoke failed (the next owner replays more): {e}")
                    }
                }
            }
            shared.revoked.extend(revoked);
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        match rebalance {
            Rebalance::Assign(tpl) => {
                shared.assigned = Some(
                    tpl.elements()
                        .iter()
                        .map(|e| (e.topic().to_owned(), e.partition()))
                        .collect(),
                );
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::error!("rebalance error: {e}"),
        }
    }
}

/// Counts a running host keeps outside the tasks.
#[derive(Debug, Default)]
pub struct HostStats {
    /// Per side: left, right.
    pub consumed: [AtomicU64; 2],
}

pub struct Host {
    config: Config,
    registry: Arc<PluginRegistry>,
    pub stats: Arc<HostStats>,
    pub metrics: Arc<Metrics>,
    /// Unix ms of the last finished round, for `/healthz`.
    pub heartbeat_ms: Arc<AtomicU64>,
}

fn client_config(config: &Config) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.kafka.bootstrap_servers);
    c
}

impl Host {
    pub fn new(config: Config, registry: Arc<PluginRegistry>) -> Self {
        Host {
            config,
            registry,
            stats: Arc::default(),
            metrics: Arc::default(),
            heartbeat_ms: Arc::new(AtomicU64::new(crate::admin::now_ms())),
        }
    }

    /// What the admin server reads of this host; `token` guards every request but `/healthz`;
    /// uploads are kept in `upload_dir` (the plugin directory), if any.
    pub fn admin_state(
        &self,
        token: Option<String>,
        upload_dir: Option<std::path::PathBuf>,
    ) -> crate::admin::AdminState {
        crate::admin::AdminState {
            metrics: self.metrics.clone(),
            registry: self.registry.clone(),
            heartbeat_ms: self.heartbeat_ms.clone(),
            token,
            upload_dir,
        }
    }

    /// Runs until `shutdown` is set; then finishes the round, commits and leaves the group.
    pub fn run(&self, shutdown: &AtomicBool) -> Result<()> {
        let cfg = &self.config;
        let (left, right) = (cfg.join.left.as_str(), cfg.join.right.as_str());
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut consumer_config = client_config(cfg);
        consumer_config
            .set("group.id", &cfg.kafka.group_id)
            .set("partition.assignment.strategy", "range")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // librdkafka pauses a partition's fetching for this long once its local queue is full
            // (default 1 s); with a slow plugin the queue then ran dry while waiting: 84k → 95k
            // records/s with the Python plugin (BENCHMARKS.md). [kafka.options] can override it.
            .set("fetch.queue.backoff.ms", "20");
        if let Some(id) = &cfg.kafka.instance_id {
            consumer_config.set("group.instance.id", id);
        }
        let mut producer_config = client_config(cfg);
        producer_config.set("enable.idempotence", "true");
        for (k, v) in &cfg.kafka.options {
            consumer_config.set(k, v);
            producer_config.set(k, v);
        }
        let consumer: BaseConsumer<JoinContext> = consumer_config
            .create_with_context(JoinContext {
                shared: shared.clone(),
            })
            .context("creating the Kafka consumer (check [kafka] and [kafka.options])")?;
        // Librdkafka warns about consumer-only options given to the producer; those are harmless.
        let mut outputs = Outputs::new(
            &producer_config,
            &cfg.output.topic,
            cfg.output.dead_letter_topic.as_deref(),
        )?;

        let counts = partition_counts(&consumer, &[left, right])?;
        assignment::check_counts(left, counts[0], right, counts[1])?;
        outputs.verify_topics()?;
        consumer
            .subscribe(&[left, right])
            .context("subscribing to the joined topics")?;
        tracing::info!(left, right, partitions = counts[0], group = %cfg.kafka.group_id, "joining");

        // Every event of a topic shares its name: no allocation of a topic string per record.
        let topic_names: [Arc<str>; 2] = [left.into(), right.into()];
        let policy = task_policy(cfg);
        // One plugin instance per worker thread; tasks are dealt to them each round (task/pool.rs).
        // More instances than tasks would never run a call (a task keeps its worker), and each
        // costs a plugin instance's memory: `workers = 300` on 6 partitions started 300.
        let worker_count = cfg.plugin.workers().min(counts[0].max(1) as usize);
        if worker_count < cfg.plugin.workers() {
            tracing::warn!(
                "plugin.workers is {} but the join has {} partitions (tasks): starting {worker_count} workers",
                cfg.plugin.workers(),
                counts[0]
            );
        }
        let mut workers = (0..worker_count)
            .map(|_| Ok(MeteredWorker::new(self.registry.worker()?)))
            .collect::<Result<Vec<_>>>()?;
        let mut tasks: BTreeMap<i32, PartitionTask> = BTreeMap::new();
        // Counters of tasks this host no longer holds, so the exported totals never go down.
        let mut retired = TaskCounters::default();
        let mut lags: HashMap<i32, [Option<i64>; 2]> = HashMap::new();
        let mut last_lag = Instant::now() - LAG_INTERVAL;
        let started = Instant::now();
        let mut last_commit = Instant::now();

        while !shutdown.load(Ordering::Relaxed) {
            // Consume what is there (bounded), waiting at most 50 ms for the first record.
            let mut polled = 0;
            while polled < 10_000 {
                let timeout = if polled == 0 {
                    Duration::from_millis(50)
                } else {
                    Duration::ZERO
                };
                let Some(msg) = consumer.poll(timeout) else {
                    break;
                };
                self.apply_rebalance(&shared, &consumer, &policy, &mut tasks, &mut retired)?;
                match msg {
                    Ok(m) => {
                        polled += 1;
                        let side = if m.topic() == left {
                            Side::Left
                        } else {
                            Side::Right
                        };
                        self.stats.consumed[side as usize].fetch_add(1, Ordering::Relaxed);
                        if let Some(task) = tasks.get_mut(&m.partition()) {
                            task.push(
                                side,
                                event_of(&m, &topic_names[side as usize]),
                                m.key().is_some(),
                            );
                        }
                    }
                    Err(e) => tracing::warn!("consumer error: {e}"),
                }
            }
            self.apply_rebalance(&shared, &consumer, &policy, &mut tasks, &mut retired)?;

            let now = started.elapsed().as_millis() as i64;
            let wall_clock = crate::admin::now_ms() as i64;
            let mut running = Vec::new();
            for task in tasks.values_mut() {
                if task.halted().is_some() {
                    continue;
                }
                task.set_wall_clock(wall_clock);
                task.set_end_offsets(
                    [left, right].map(|t| cached_high_watermark(&consumer, t, task.partition)),
                );
                running.push(task);
            }
            let mut batches = pool::run_round(running, &mut workers, now, &std::thread::sleep);
            // Every task's batch is sent, then all are awaited at once: one round trip per round.
            outputs.deliver(&mut batches, &mut tasks)?;
            for (partition, batch) in batches {
                let Some(task) = tasks.get_mut(&partition) else {
                    continue;
                };
                task.acknowledge(batch);
                if let Some(reason) = task.halted() {
                    tracing::error!(
                        "{reason}; pausing partition {} of {left} and {right}",
                        task.partition
                    );
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(left, task.partition);
                    tpl.add_partition(right, task.partition);
                    consumer.pause(&tpl).context("pausing a halted task")?;
                }
            }
            self.publish_points(&shared, &mut tasks);
            if last_lag.elapsed() >= LAG_INTERVAL {
                lags = lag_of(&consumer, left, right, tasks.keys().copied());
                last_lag = Instant::now();
            }
            self.publish_metrics(
                &tasks,
                &retired,
                &lags,
                &mut workers,
                outputs.acknowledged(),
            );
            self.heartbeat_ms
                .store(crate::admin::now_ms(), Ordering::Relaxed);
            if last_commit.elapsed() >= COMMIT_INTERVAL {
                self.commit(&consumer, &shared, CommitMode::Async);
                last_commit = Instant::now();
            }
        }
        self.publish_points(&shared, &mut tasks);
        self.commit(&consumer, &shared, CommitMode::Sync);
        consumer.unsubscribe();
        tracing::info!("left the group");
        Ok(())
    }

    /// Applies what the rebalance callbacks recorded: drops revoked tasks, starts assigned ones
    /// from their committed offsets and processed-through metadata.
    fn apply_rebalance(
        &self,
        shared: &Mutex<Shared>,
        consumer: &BaseConsumer<JoinContext>,
        policy: &crate::task::TaskPolicy,
        tasks: &mut BTreeMap<i32, PartitionTask>,
        retired: &mut TaskCounters,
    ) -> Result<()> {
        let (left, right) = (
            self.config.join.left.as_str(),
            self.config.join.right.as_str(),
        );
        let (revoked, assigned) = {
            let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
            (std::mem::take(&mut s.revoked), s.assigned.take())
        };
        for (_, partition) in &revoked {
            if let Some(task) = tasks.remove(partition) {
                retired.add(&task.counters);
                tracing::info!(task = partition, "task revoked; its state is dropped");
            }
        }
        let Some(assigned) = assigned else {
            return Ok(());
        };
        self.metrics.update(|m| m.rebalances += 1);
        let held = |topic: &str| -> Vec<i32> {
            let mut ps: Vec<i32> = assigned
                .iter()
                .filter(|(t, _)| t == topic)
                .map(|(_, p)| *p)
                .collect();
            ps.sort_unstable();
            ps
        };
        // One line per assignment, both topics side by side: co-partitioning is visible in the log.
        tracing::info!(left = ?held(left), right = ?held(right), "assignment");
        let numbers =
            assignment::tasks(left, right, assigned.iter().map(|(t, p)| (t.as_str(), *p)))?;
        let new: Vec<i32> = numbers
            .into_iter()
            .filter(|p| !tasks.contains_key(p))
            .collect();
        let mut wanted = TopicPartitionList::new();
        for &p in &new {
            wanted.add_partition(left, p);
            wanted.add_partition(right, p);
        }
        if wanted.count() == 0 {
            return Ok(());
        }
        let committed = consumer
            .committed_offsets(wanted, TIMEOUT)
            .context("reading committed offsets of the new tasks")?;
        let mut starts: HashMap<(String, i32), CommitPoint> = HashMap::new();
        for e in committed.elements() {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            let point = CommitPoint {
                offset,
                processed_through: CommitPoint::parse_metadata(e.metadata()),
            };
            starts.insert((e.topic().to_owned(), e.partition()), point);
        }
        for p in new {
            let start = [left, right].map(|t| {
                starts
                    .get(&(t.to_owned(), p))
                    .copied()
                    .unwrap_or(CommitPoint::new(0, [], None))
            });
            tracing::info!(task = p, left_offset = start[0].offset, right_offset = start[1].offset,
                left_processed_through = ?start[0].processed_through, right_processed_through = ?start[1].processed_through,
                "task assigned");
            let mut task = PartitionTask::new(p, policy.clone(), start);
            task.set_wall_clock(crate::admin::now_ms() as i64);
            // The consumer's cached end offsets may predate this assignment (kept from an earlier
            // one): the broker's answer now is the floor below which they are not trusted.
            task.set_end_offset_floors([left, right].map(|t| {
                match consumer.fetch_watermarks(t, p, TIMEOUT) {
                    Ok((_, high)) => high,
                    Err(e) => {
                        tracing::warn!(
                            topic = t,
                            partition = p,
                            "end offset not known until the first fetch: {e}"
                        );
                        0
                    }
                }
            }));
            tasks.insert(p, task);
        }
        Ok(())
    }

    /// Copies this round's counts into the shared metrics (one lock per round, none per record).
    fn publish_metrics(
        &self,
        tasks: &BTreeMap<i32, PartitionTask>,
        retired: &TaskCounters,
        lags: &HashMap<i32, [Option<i64>; 2]>,
        workers: &mut [MeteredWorker],
        produced: u64,
    ) {
        let mut counters = retired.clone();
        for task in tasks.values() {
            counters.add(&task.counters);
        }
        let gauges = tasks
            .iter()
            .map(|(p, task)| {
                let (events, bytes) = task.held();
                let lag = lags.get(p).copied().unwrap_or_default();
                (*p, TaskGauges { events, bytes, lag })
            })
            .collect();
        let calls: Vec<_> = workers.iter_mut().flat_map(|w| w.take_calls()).collect();
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        self.metrics.update(|m| {
            m.consumed
                .insert(left.clone(), self.stats.consumed[0].load(Ordering::Relaxed));
            m.consumed.insert(
                right.clone(),
                self.stats.consumed[1].load(Ordering::Relaxed),
            );
            m.counters = counters;
            m.produced = produced;
            m.tasks = gauges;
            m.processing = !m.tasks.is_empty();
            for (label, stats) in calls {
                m.calls.entry(label).or_default().add(&stats);
            }
        });
    }

    fn publish_points(&self, shared: &Mutex<Shared>, tasks: &mut BTreeMap<i32, PartitionTask>) {
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        for (p, task) in tasks.iter_mut() {
            let [l, r] = task.commit_points();
            s.points.insert((left.clone(), *p), l);
            s.points.insert((right.clone(), *p), r);
        }
    }

    fn commit(
        &self,
        consumer: &BaseConsumer<JoinContext>,
        shared: &Mutex<Shared>,
        mode: CommitMode,
    ) {
        let points: Vec<_> = {
            let s = shared.lock().unwrap_or_else(|e| e.into_inner());
            s.points.iter().map(|(k, v)| (k.clone(), *v)).collect()
        };
        if points.is_empty() {
            return;
        }
        match consumer.commit(&commit_list(points), mode) {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!("commit failed (will retry; a restart would replay more): {e}")
            }
        }
    }
}

fn partition_counts(
    consumer: &BaseConsumer<JoinContext>,
    topics: &[&str; 2],
) -> Result<[usize; 2]> {
    let mut counts = [0; 2];
    for (i, topic) in topics.iter().enumerate() {
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .with_context(|| {
                format!("reading metadata of topic {topic:?} (is kafka.bootstrap_servers right?)")
            })?;
        counts[i] = metadata
            .topics()
            .iter()
            .find(|t| t.name() == *topic)
            .filter(|t| t.error().is_none())
            .map_or(0, |t| t.partitions().len());
    }
    Ok(counts)
}

/// The event of a consumed record; `topic` is the record's topic name, shared.
fn event_of<M: Message>(m: &M, topic: &Arc<str>) -> Event {
    let headers = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| crate::event::Header {
                    key: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect()
        })
        .unwrap_or_default();
    Event {
        topic: topic.clone(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp: m.timestamp().to_millis().unwrap_or(0),
        key: m.key().map(Box::from).unwrap_or_default(),
        value: m.payload().map(Box::from),
        headers,
    }
}
