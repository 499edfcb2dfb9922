//! `cojoin run`: the loop that ties the Kafka source, the tasks, the plugin and the Kafka sink.
//!
//! The life of a record: the [`Intake`](crate::kafka::intake::Intake) polls it and hands it, as an event of the left or right
//! side, to the [`PartitionTask`] of its partition number, which queues it. Each round the tasks
//! run on the worker threads (one plugin instance each, `plugin.workers`): a task takes the
//! records its queue allows in timestamp order, joins them, and calls the plugin for each match and
//! expiry; what it emits (outputs and dead letters) is its batch. The [`Sink`] produces every
//! batch of the round and waits for every acknowledgement (an output the broker refuses goes back
//! to its task, which dead-letters its inputs); only then is each batch acknowledged to its task,
//! and the record counts as processed. The task's commit points — the smallest offset it still
//! needs, and in the metadata how far processing got — are published to the source, which commits
//! them every `output.commit_interval` (under exactly-once sooner when the loop is idle with
//! outputs held back: run/cadence.rs), on revoke and on shutdown.
//!
//! Tasks follow partitions (kafka/pairing.rs): a task whose partition is revoked commits and drops
//! its state; a task starts, from its committed points (replaying what its state needs), once the
//! host holds both its partitions; a lone half is paused until its pair comes. Under the new group
//! protocol (KIP-848) the tasks a rebalance does not move keep running, state and queue untouched;
//! under the classic one every rebalance revokes and restarts every task.

pub mod action;
mod cadence;
mod commit;
mod publish;
mod round;
mod setup;
mod tasks;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::config::Config;
use crate::join::SpillDir;
use crate::kafka::repartitioner::Repartitioner;
use crate::kafka::transaction::Outcome;
use crate::metrics::Metrics;
use crate::plugin::PluginRegistry;
use crate::report::Happened;
use crate::task::backpressure::QueueMarks;
use crate::task::PartitionTask;
use cadence::Cadence;
use setup::Started;
use tasks::Held;

/// Exactly-once: transactional producers renewed in a row, without a commit between, before
/// the host stops (see [`Host::renew_producer`]).
const MAX_RENEWALS: u32 = 3;
/// How often consumer lag is recomputed for the metrics.
const LAG_INTERVAL: Duration = Duration::from_secs(2);
/// The least `join.max_idle` of a join reading an internal repartition topic.
const REPARTITIONED_MAX_IDLE_MS: i64 = 1000;
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

/// What the loop holds between rounds, beside the intake.
struct Running {
    tasks: Held,
    /// The totals the metrics were last brought up to (publish.rs).
    published: publish::Published,
    lags: HashMap<i32, Vec<Option<i64>>>,
    /// `memory.queue_bytes`, shared by the tasks held (task/backpressure.rs).
    queue_bytes: u64,
    /// The topics joined: each task's queue has a side per topic.
    topics: usize,
    /// Exactly-once: transactional producers renewed since the last committed transaction.
    renewals: u32,
}

impl Running {
    fn marks(&self) -> QueueMarks {
        QueueMarks::new(self.queue_bytes, self.tasks.map.len(), self.topics)
    }

    /// How long the first poll of a round may wait for a record: not at all when a task has
    /// `more` to do now; else until a parked task's backoff passed (a task waiting to retry a
    /// failed call runs again then, and a parked task alone does not spin), at most
    /// [`POLL_WAIT_MS`]. `now` is the loop's clock (ms since it started).
    fn poll_wait(&self, more: bool, now: i64) -> Duration {
        if more {
            return Duration::ZERO;
        }
        let ms = self
            .tasks
            .map
            .values()
            .filter_map(PartitionTask::parked_until)
            .min()
            .map_or(POLL_WAIT_MS, |until| {
                until.saturating_sub(now).clamp(0, POLL_WAIT_MS)
            });
        Duration::from_millis(ms as u64)
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
            mut intake,
            mut workers,
            mut run,
            // Stops the global table's reader when the loop ends.
            global: _global,
        } = self.start()?;
        let cfg = &self.config;
        let started = Instant::now();
        let mut last_lag = started - LAG_INTERVAL;
        let transactions = sink.transactions();
        // Outputs in the open transaction, which a read_committed reader sees once it commits.
        let pending = || transactions.as_ref().is_some_and(|t| t.is_open());
        let mut cadence = Cadence::new(cfg.output.commit_interval(), transactions.is_some());
        // A task stopped at its batch budget last round with records left: no waiting to poll.
        let mut more = false;
        while !shutdown.load(Ordering::Relaxed) {
            let lap = Instant::now();
            // Not past the next commit: a quiet poll must not hold back outputs.
            let wait = run
                .poll_wait(more, started.elapsed().as_millis() as i64)
                .min(cadence.until_due(pending()));
            let waited = intake.poll(&mut run.tasks, wait)?;
            more = self.round(&mut intake, &mut sink, &mut workers, &mut run, started)?;
            if let Some(why) = repartitioner.as_mut().and_then(Repartitioner::stopped) {
                // The join would wait on internal topics that no longer fill.
                anyhow::bail!("the repartition step stopped: {why}; stopping without committing (a restart resumes from the last commit)");
            }
            intake.report_waiting(&cfg.join.topics);
            if last_lag.elapsed() >= LAG_INTERVAL {
                run.lags = intake.lag(&run.tasks);
                last_lag = Instant::now();
            }
            self.publish_metrics(&intake, &mut run, &mut workers, sink.acknowledged());
            self.heartbeat_ms
                .store(crate::clock::now_ms(), Ordering::Relaxed);
            // Only a poll's wait says the loop caught up: an ask for end offsets is made while
            // the other side may have records queued (its round trip would commit a busy loop).
            cadence.pass(lap.elapsed(), waited);
            if cadence.due(pending()) {
                let outcome = intake.commit();
                self.after_commit(outcome, &mut intake, &mut sink, &mut run)?;
                cadence.committed();
            }
        }
        if let Outcome::Fatal(why) = intake.leave() {
            anyhow::bail!("{why}; stopping (a restart resumes from the last commit)");
        }
        Happened::LeftGroup.emit(&self.metrics);
        Ok(())
    }
}
