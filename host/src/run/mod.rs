//! `cojoin run`: the loop that ties the Kafka source, the tasks, the plugin and the Kafka sink.
//!
//! The life of a record: the [`Source`] polls it and hands it, as an event of the left or right
//! side, to the [`PartitionTask`] of its partition number, which queues it. Each round the tasks
//! run on the worker threads (one plugin instance each, `plugin.workers`): a task takes the
//! records its queue allows in timestamp order, joins them, and calls the plugin for each match and
//! expiry; what it emits (outputs and dead letters) is its batch. The [`Sink`] produces every
//! batch of the round and waits for every acknowledgement (an output the broker refuses goes back
//! to its task, which dead-letters its inputs); only then is each batch acknowledged to its task,
//! and the record counts as processed. The task's commit points — the smallest offset it still
//! needs, and in the metadata how far processing got — are published to the source, which commits
//! them every second, on revoke and on shutdown. A rebalance drops revoked tasks with their state
//! and starts assigned ones from their committed points, replaying what the state needs.

pub mod action;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::config::Config;
use crate::kafka::sink::{Acknowledged, Sink};
use crate::kafka::source::Source;
use crate::kafka::{assignment, client};
use crate::metrics::{Metrics, TaskGauges};
use crate::plugin::PluginRegistry;
use crate::report::Happened;
use crate::task::{pool, PartitionTask, TaskCounters, TaskPolicy};
use action::MeteredAction;

/// How often commit points are committed while running (also on revoke and shutdown).
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// How often consumer lag is recomputed for the metrics.
const LAG_INTERVAL: Duration = Duration::from_secs(2);
/// Records polled at most per round, so that rounds (and commits) keep coming under a backlog.
const POLL_PER_ROUND: usize = 10_000;

pub struct Host {
    config: Config,
    registry: Arc<PluginRegistry>,
    pub metrics: Arc<Metrics>,
    /// Unix ms of the last finished round, for `/healthz`.
    pub heartbeat_ms: Arc<AtomicU64>,
}

/// What the loop holds between rounds.
struct Running {
    tasks: BTreeMap<i32, PartitionTask>,
    /// Counters of tasks this host no longer holds, so the exported totals never go down.
    retired: TaskCounters,
    /// Records consumed per side.
    consumed: [u64; 2],
    lags: HashMap<i32, [Option<i64>; 2]>,
}

impl Host {
    pub fn new(config: Config, registry: Arc<PluginRegistry>) -> Self {
        Host {
            config,
            registry,
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
        let source = Source::new(
            &client::consumer(&cfg.kafka),
            left,
            right,
            self.metrics.clone(),
        )?;
        let mut sink = Sink::new(
            &client::producer(&cfg.kafka),
            &cfg.output.topic,
            cfg.output.dead_letter_topic.as_deref(),
            self.metrics.clone(),
        )?;
        let counts = source.partition_counts()?;
        assignment::check_counts(left, counts[0], right, counts[1])?;
        sink.verify_topics()?;
        source.subscribe()?;
        Happened::JoiningGroup {
            left,
            right,
            partitions: counts[0],
            group: &cfg.kafka.group_id,
        }
        .emit(&self.metrics);

        let policy = crate::wiring::task_policy(cfg);
        let mut workers = self.start_workers(counts[0])?;
        let mut run = Running {
            tasks: BTreeMap::new(),
            retired: TaskCounters::default(),
            consumed: [0; 2],
            lags: HashMap::new(),
        };
        let started = Instant::now();
        let (mut last_lag, mut last_commit) = (started - LAG_INTERVAL, started);
        while !shutdown.load(Ordering::Relaxed) {
            // Consume what is there (bounded), waiting at most 50 ms for the first record.
            for polled in 0..POLL_PER_ROUND {
                let wait = if polled == 0 { 50 } else { 0 };
                let record = source.poll(Duration::from_millis(wait));
                self.apply_rebalance(&source, &policy, &mut run)?;
                let Some(record) = record else { break };
                run.consumed[record.side as usize] += 1;
                if let Some(task) = run.tasks.get_mut(&record.event.partition) {
                    task.push(record.side, record.event);
                }
            }
            self.round(&source, &mut sink, &mut workers, &mut run, started)?;
            if last_lag.elapsed() >= LAG_INTERVAL {
                run.lags = source.lag(run.tasks.keys().copied());
                last_lag = Instant::now();
            }
            self.publish_metrics(&run, &mut workers, sink.acknowledged());
            self.heartbeat_ms
                .store(crate::admin::now_ms(), Ordering::Relaxed);
            if last_commit.elapsed() >= COMMIT_INTERVAL {
                source.commit();
                last_commit = Instant::now();
            }
        }
        source.commit();
        source.close();
        Happened::LeftGroup.emit(&self.metrics);
        Ok(())
    }

    /// One plugin instance per worker thread; tasks are dealt to them each round (task/pool.rs).
    /// More instances than tasks would never run a call (a task keeps its worker), and each costs
    /// a plugin instance's memory: `workers = 300` on 6 partitions started 300.
    fn start_workers(&self, partitions: usize) -> Result<Vec<MeteredAction>> {
        let wanted = self.config.plugin.workers();
        let count = wanted.min(partitions.max(1));
        if count < wanted {
            tracing::warn!(
                "plugin.workers is {wanted} but the join has {partitions} partitions (tasks): starting {count} workers"
            );
        }
        (0..count)
            .map(|_| Ok(MeteredAction::new(self.registry.handle()?)))
            .collect()
    }

    /// Runs every task that can run, produces the batches, acknowledges them and publishes the
    /// tasks' commit points.
    fn round(
        &self,
        source: &Source,
        sink: &mut Sink,
        workers: &mut [MeteredAction],
        run: &mut Running,
        started: Instant,
    ) -> Result<()> {
        let now = started.elapsed().as_millis() as i64;
        let wall_clock = crate::admin::now_ms() as i64;
        let mut running = Vec::new();
        for task in run.tasks.values_mut() {
            if task.halted().is_some() {
                continue;
            }
            task.set_wall_clock(wall_clock);
            task.set_end_offsets(source.cached_end_offsets(task.partition));
            running.push(task);
        }
        let mut batches = pool::run_round(running, workers, now, &std::thread::sleep);
        // Every task's batch is sent, then all are awaited at once: one round trip per round.
        sink.deliver(&mut batches, &mut run.tasks)?;
        for (partition, batch) in batches {
            let Some(task) = run.tasks.get_mut(&partition) else {
                continue;
            };
            task.acknowledge(batch);
            if let Some(reason) = task.halted() {
                Happened::TaskHalted {
                    task: partition,
                    reason,
                    left: &self.config.join.left,
                    right: &self.config.join.right,
                }
                .emit(&self.metrics);
                source.pause(partition)?;
            }
        }
        for (p, task) in run.tasks.iter_mut() {
            source.publish(*p, task.commit_points());
        }
        Ok(())
    }

    /// Applies what the rebalance callbacks recorded: drops revoked tasks, starts assigned ones
    /// from their committed offsets and processed-through metadata.
    fn apply_rebalance(
        &self,
        source: &Source,
        policy: &TaskPolicy,
        run: &mut Running,
    ) -> Result<()> {
        let (left, right) = (
            self.config.join.left.as_str(),
            self.config.join.right.as_str(),
        );
        let rebalanced = source.rebalanced();
        for (_, partition) in &rebalanced.revoked {
            if let Some(task) = run.tasks.remove(partition) {
                run.retired.add(&task.counters);
                Happened::TaskRevoked { task: *partition }.emit(&self.metrics);
            }
        }
        let Some(assigned) = rebalanced.assigned else {
            return Ok(());
        };
        let held = |topic: &str| -> Vec<i32> {
            let mut ps: Vec<i32> = assigned
                .iter()
                .filter(|(t, _)| t == topic)
                .map(|(_, p)| *p)
                .collect();
            ps.sort_unstable();
            ps
        };
        Happened::Assignment {
            left: &held(left),
            right: &held(right),
        }
        .emit(&self.metrics);
        let numbers =
            assignment::tasks(left, right, assigned.iter().map(|(t, p)| (t.as_str(), *p)))?;
        let new: Vec<i32> = numbers
            .into_iter()
            .filter(|p| !run.tasks.contains_key(p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let starts = source.committed(&new)?;
        for p in new {
            let start = starts[&p];
            Happened::TaskAssigned {
                task: p,
                start: &start,
            }
            .emit(&self.metrics);
            let mut task = PartitionTask::new(p, policy.clone(), start);
            task.set_wall_clock(crate::admin::now_ms() as i64);
            // The consumer's cached end offsets may predate this assignment (kept from an earlier
            // one): the broker's answer now is the floor below which they are not trusted.
            task.set_end_offset_floors(source.end_offsets(p));
            run.tasks.insert(p, task);
        }
        Ok(())
    }

    /// Copies this round's counts into the shared metrics (one lock per round, none per record).
    fn publish_metrics(
        &self,
        run: &Running,
        workers: &mut [MeteredAction],
        acknowledged: Acknowledged,
    ) {
        let mut counters = run.retired.clone();
        for task in run.tasks.values() {
            counters.add(&task.counters);
        }
        let gauges = run
            .tasks
            .iter()
            .map(|(p, task)| {
                let (events, bytes) = task.held();
                let lag = run.lags.get(p).copied().unwrap_or_default();
                (*p, TaskGauges { events, bytes, lag })
            })
            .collect();
        let calls: Vec<_> = workers.iter_mut().flat_map(|w| w.take_calls()).collect();
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        self.metrics.update(|m| {
            m.consumed.insert(left.clone(), run.consumed[0]);
            m.consumed.insert(right.clone(), run.consumed[1]);
            m.counters = counters;
            m.outputs_acknowledged = acknowledged.outputs;
            m.dead_letters_acknowledged = acknowledged.dead_letters;
            m.tasks = gauges;
            m.processing = !m.tasks.is_empty();
            for (label, stats) in calls {
                m.calls.entry(label).or_default().add(&stats);
            }
        });
    }
}
