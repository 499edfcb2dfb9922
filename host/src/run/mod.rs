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
//! them every second, on revoke and on shutdown.
//!
//! Tasks follow partitions (kafka/pairing.rs): a task whose partition is revoked commits and drops
//! its state; a task starts, from its committed points (replaying what its state needs), once the
//! host holds both its partitions; a lone half is paused until its pair comes. Under the new group
//! protocol (KIP-848) the tasks a rebalance does not move keep running, state and queue untouched;
//! under the classic one every rebalance revokes and restarts every task.

pub mod action;
mod ahead;
mod commit;
mod intake;
mod publish;
mod round;
mod setup;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::config::Config;
use crate::join::{CommitPoint, SpillDir};
use crate::kafka::pairing::Pairing;
use crate::kafka::repartitioner::Repartitioner;
use crate::kafka::source::Source;
use crate::kafka::transaction::{no_keep_alive, Outcome};
use crate::metrics::Metrics;
use crate::plugin::PluginRegistry;
use crate::report::Happened;
use crate::task::backpressure::QueueMarks;
use crate::task::{PartitionTask, TaskCounters, TaskPolicy};
use ahead::Polled;
use setup::Started;

/// Exactly-once: transactional producers renewed in a row, without a commit between, before
/// the host stops (see [`Host::renew_producer`]).
const MAX_RENEWALS: u32 = 3;
/// How often consumer lag is recomputed for the metrics.
const LAG_INTERVAL: Duration = Duration::from_secs(2);
/// A task waiting longer than this for its pair is reported (a log line) once.
const WAITING_REPORTED_AFTER: Duration = Duration::from_secs(5);
/// The least `join.max_idle` of a join reading an internal repartition topic.
const REPARTITIONED_MAX_IDLE_MS: i64 = 1000;
/// Records polled at most per round, so that rounds (and commits) keep coming under a backlog.
const POLL_PER_ROUND: usize = 10_000;
/// How long a round waits for its first record (ms), when no task has more to do now.
const POLL_WAIT_MS: i64 = 50;
/// How long a task takes records for in one round: a round lasts about as long as its longest
/// task, so the workers finish it close together (task/pool.rs) and rounds keep coming.
const ROUND_TASK_TIME: Duration = Duration::from_millis(20);

/// This host's directory for spilled join state, under `state.dir` (leftovers of hosts that
/// died are removed).
fn spill_dir(base: &std::path::Path) -> Result<Arc<SpillDir>> {
    SpillDir::create(base).map_err(|e| {
        anyhow::anyhow!(
            "state.dir {}: cannot create this host's spill directory there: {e}; set state.dir to a writable directory",
            base.display()
        )
    })
}

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
    /// The totals the metrics were last brought up to (publish.rs).
    published: publish::Published,
    lags: HashMap<i32, [Option<i64>; 2]>,
    /// Which partitions this host holds, and which tasks are active (both halves held).
    pairing: Pairing,
    /// Tasks already reported as waiting for their pair.
    waiting_reported: BTreeSet<i32>,
    policy: TaskPolicy,
    /// `memory.queue_bytes`, shared by the tasks held (task/backpressure.rs).
    queue_bytes: u64,
    /// `memory.state_bytes`, shared by the tasks held, and where state beyond it goes.
    state_bytes: u64,
    spill: Arc<SpillDir>,
    /// A record larger than a task side's queue share was reported (once per host).
    large_record_reported: bool,
    /// Records polled while the last round ran, not yet handed to their tasks.
    ahead: Polled,
    /// Exactly-once: transactional producers renewed since the last committed transaction.
    renewals: u32,
    /// Times the consumer was made again because the broker still held its static member id.
    id_held_attempts: u32,
}

impl Running {
    fn marks(&self) -> QueueMarks {
        QueueMarks::new(self.queue_bytes, self.tasks.len())
    }

    /// Each task's share of `memory.state_bytes`.
    fn state_budget(&self) -> usize {
        usize::try_from(self.state_bytes / self.tasks.len().max(1) as u64).unwrap_or(usize::MAX)
    }

    /// A task starting at its committed points, its state spilling to this host's directory.
    fn start_task(&self, source: &Source, p: i32, start: [CommitPoint; 2]) -> PartitionTask {
        let mut task = PartitionTask::new(p, self.policy.clone(), start);
        task.set_wall_clock(crate::clock::now_ms() as i64);
        // The consumer's cached end offsets may predate this assignment (kept from an earlier
        // one): the broker's answer now is the floor below which they are not trusted.
        task.set_end_offset_floors(source.end_offsets(p));
        task.spill_to(self.spill.clone());
        task
    }
}

impl Host {
    pub fn new(config: Config, registry: Arc<PluginRegistry>) -> Self {
        Host {
            config,
            registry,
            metrics: Arc::default(),
            heartbeat_ms: Arc::new(AtomicU64::new(crate::clock::now_ms())),
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
        let Started {
            mut repartitioner,
            mut sink,
            mut source,
            new_source,
            mut workers,
            mut run,
        } = self.start()?;
        let cfg = &self.config;
        let started = Instant::now();
        let (mut last_lag, mut last_commit) = (started - LAG_INTERVAL, started);
        // A task stopped at its batch budget last round with records left: no waiting to poll.
        let mut more = false;
        while !shutdown.load(Ordering::Relaxed) {
            self.poll(&mut source, &new_source, &mut run, more, started)?;
            more = self.round(&source, &mut sink, &mut workers, &mut run, started)?;
            if let Some(why) = repartitioner.as_mut().and_then(Repartitioner::stopped) {
                // The join would wait on internal topics that no longer fill.
                anyhow::bail!("the repartition step stopped: {why}; stopping without committing (a restart resumes from the last commit)");
            }
            self.report_waiting(&mut run);
            if last_lag.elapsed() >= LAG_INTERVAL {
                run.lags = source.lag(run.tasks.keys().copied());
                last_lag = Instant::now();
            }
            self.publish_metrics(&mut run, &mut workers, sink.acknowledged());
            self.heartbeat_ms
                .store(crate::clock::now_ms(), Ordering::Relaxed);
            if last_commit.elapsed() >= cfg.output.commit_interval() {
                let outcome = source.commit(&mut || run.ahead.keep_alive(&source));
                self.after_commit(outcome, &source, &mut sink, &mut run)?;
                last_commit = Instant::now();
            }
        }
        let outcome = source.commit(&mut no_keep_alive);
        if let Outcome::Fatal(why) = outcome {
            anyhow::bail!("{why}; stopping (a restart resumes from the last commit)");
        }
        source.close();
        Happened::LeftGroup.emit(&self.metrics);
        Ok(())
    }
}
