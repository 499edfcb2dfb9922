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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::config::Config;
use crate::config::Guarantee;
use crate::event::Side;
use crate::join::{CommitPoint, SpillDir};
use crate::kafka::pairing::Pairing;
use crate::kafka::protocol::{self, Protocol};
use crate::kafka::repartitioner::{self, Repartitioner};
use crate::kafka::sink::{Acknowledged, Delivered, Sink};
use crate::kafka::source::{InstanceIdHeld, Record, Source};
use crate::kafka::transaction::{self, no_keep_alive, Outcome};
use crate::kafka::{assignment, authz, client};
use crate::metrics::{Metrics, TaskGauges};
use crate::plugin::PluginRegistry;
use crate::repartition;
use crate::report::Happened;
use crate::task::backpressure::{self, QueueMarks};
use crate::task::{pool, PartitionTask, TaskCounters, TaskPolicy};
use action::MeteredAction;
use ahead::Polled;

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
        task.set_wall_clock(crate::admin::now_ms() as i64);
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
        // A side re-keyed into an internal topic is read from there (crate::repartition).
        let source_counts = repartitioner::partition_counts(cfg)?;
        let [left_count, right_count] = source_counts;
        let plan = repartition::plan(&cfg.join, &cfg.kafka.group_id, left_count, right_count);
        // Before anything joins, creates or writes: a missing ACL stops the host here, named.
        authz::require(cfg, &plan, &self.metrics)?;
        let (protocol, why) =
            protocol::choose(cfg.kafka.group_protocol, &cfg.kafka.options, || {
                protocol::broker_protocols(&client::base(&cfg.kafka))
            });
        Happened::GroupProtocol {
            protocol: protocol.as_str(),
            why: &why,
        }
        .emit(&self.metrics);
        let mut repartitioner = if plan.sides.is_empty() {
            None
        } else {
            Some(Repartitioner::start(
                cfg,
                &plan,
                protocol,
                self.metrics.clone(),
            )?)
        };
        if !plan.sides.is_empty() {
            // The internal topics exist now: what the broker could not tell before they did
            // (Write, Read, Delete on them) is asked again.
            authz::require(cfg, &plan, &self.metrics)?;
        }
        let (left, right) = (plan.join_topics[0].as_str(), plan.join_topics[1].as_str());
        let transactional_id = (cfg.output.guarantee == Guarantee::ExactlyOnce).then(|| {
            transaction::transactional_id(&cfg.kafka.group_id, cfg.kafka.instance_id.as_deref())
        });
        let mut sink = Sink::new(
            &client::producer(&cfg.kafka, cfg.output.compression),
            &cfg.output.topic,
            cfg.output.dead_letter_topic.as_deref(),
            self.metrics.clone(),
            transactional_id.as_deref(),
        )?;
        sink.set_principal(crate::acl::principal(cfg));
        let consumer_config = client::consumer(
            &cfg.kafka,
            protocol,
            backpressure::prefetch_bytes(cfg.memory.queue_bytes),
        );
        let transactions = sink.transactions();
        let new_source = || -> Result<Source> {
            let mut source = Source::new(
                &consumer_config,
                left,
                right,
                self.metrics.clone(),
                transactions.clone(),
            )?;
            source.set_principal(crate::acl::principal(cfg));
            Ok(source)
        };
        let mut source = new_source()?;
        let counts = plan.join_counts(source_counts);
        assignment::check_counts(left, counts[0], right, counts[1])?;
        sink.verify_topics()?;
        source.subscribe()?;
        let mut id_held_attempts = 0u32;
        Happened::JoiningGroup {
            left,
            right,
            partitions: counts[0],
            group: &cfg.kafka.group_id,
        }
        .emit(&self.metrics);

        let mut policy = crate::wiring::task_policy(cfg);
        if !plan.sides.is_empty() && policy.max_idle_ms < REPARTITIONED_MAX_IDLE_MS {
            // The repartition step writes in bursts (a batch, then its flush and commit): at the
            // tip of an internal topic a partition looks caught up between two bursts, and with a
            // shorter idle wait the task went on without it (14% of a backlog found late at
            // 100 ms, none at 1 s: BENCHMARKS.md).
            tracing::info!(
                configured_ms = policy.max_idle_ms,
                "join.max_idle raised to {REPARTITIONED_MAX_IDLE_MS} ms: a side is repartitioned"
            );
            policy.max_idle_ms = REPARTITIONED_MAX_IDLE_MS;
        }
        let spill = spill_dir(&cfg.state.dir())?;
        let mut workers = self.start_workers(counts[0])?;
        let mut run = Running {
            tasks: BTreeMap::new(),
            retired: TaskCounters::default(),
            consumed: [0; 2],
            lags: HashMap::new(),
            pairing: Pairing::new(protocol == Protocol::Classic),
            waiting_reported: BTreeSet::new(),
            policy,
            queue_bytes: cfg.memory.queue_bytes,
            state_bytes: cfg.memory.state_bytes,
            spill,
            large_record_reported: false,
            ahead: Polled::default(),
            renewals: 0,
        };
        let started = Instant::now();
        let (mut last_lag, mut last_commit) = (started - LAG_INTERVAL, started);
        // A task stopped at its batch budget last round with records left: no waiting to poll.
        let mut more = false;
        while !shutdown.load(Ordering::Relaxed) {
            // What was polled during the last round first, then what is there (bounded),
            // waiting at most 50 ms for the first record.
            let ahead = run.ahead.len();
            self.hand_over(&source, &mut run)?;
            // A task waiting to retry a failed call (parked) runs again once its backoff passed:
            // the wait for a record ends by then (and a parked task alone does not spin).
            let now = started.elapsed().as_millis() as i64;
            let idle_wait = run
                .tasks
                .values()
                .filter_map(PartitionTask::parked_until)
                .min()
                .map_or(POLL_WAIT_MS, |until| {
                    until.saturating_sub(now).clamp(0, POLL_WAIT_MS)
                });
            for polled in ahead..POLL_PER_ROUND {
                let wait = if polled == 0 && !more { idle_wait } else { 0 };
                let record = match source.poll(Duration::from_millis(wait as u64)) {
                    // A static member restarted after a kill -9 under the consumer protocol:
                    // the broker releases its id at the old member's session timeout. Until
                    // then a new consumer asks again, backing off (it holds no task yet).
                    Err(e) if e.is::<InstanceIdHeld>() && run.tasks.is_empty() => {
                        let attempt = id_held_attempts;
                        id_held_attempts += 1;
                        if attempt == 0 {
                            tracing::warn!("{e}; asking again until it is released");
                        }
                        // 1, 2, 4, then every 8 s (the broker's default timeout is 45 s).
                        std::thread::sleep(Duration::from_secs(1 << attempt.min(3)));
                        source = new_source()?;
                        source.subscribe()?;
                        break;
                    }
                    record => record?,
                };
                self.apply_rebalance(&source, &mut run)?;
                let Some(record) = record else { break };
                run.consumed[record.side as usize] += 1;
                self.queue(&source, &mut run, record)?;
            }
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
            self.publish_metrics(&run, &mut workers, sink.acknowledged());
            self.heartbeat_ms
                .store(crate::admin::now_ms(), Ordering::Relaxed);
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

    /// Hands the records polled during the last round to their tasks, in the order the loop
    /// would have (run/ahead.rs). A side its task's queue pauses meanwhile takes none of its
    /// later records: its partition is moved back to the first of them, fetched again on resume.
    fn hand_over(&self, source: &Source, run: &mut Running) -> Result<()> {
        let polled = std::mem::take(&mut run.ahead);
        // A task with a partition revoked meanwhile stops when the rebalance is applied: its
        // records are the next owner's to read from the committed points (as the loop drops
        // what it polls for a task it does not hold).
        let revoked = if polled.rebalance {
            source.revoked_pending()
        } else {
            Default::default()
        };
        // Sides paused by this hand-over, and the first record each did not take.
        let mut held_back: HashMap<(Side, i32), Option<i64>> = HashMap::new();
        for record in polled.before {
            if revoked.contains(&record.event.partition) {
                continue;
            }
            let at = (record.side, record.event.partition);
            if let Some(first) = held_back.get_mut(&at) {
                first.get_or_insert(record.event.offset);
                continue;
            }
            run.consumed[record.side as usize] += 1;
            if self.queue(source, run, record)? {
                held_back.insert(at, None);
            }
        }
        for ((side, p), first) in held_back {
            if let Some(offset) = first {
                source.seek_side(side, p, offset)?;
            }
        }
        if polled.rebalance {
            self.apply_rebalance(source, run)?;
        }
        for record in polled.after {
            run.consumed[record.side as usize] += 1;
            self.queue(source, run, record)?;
        }
        match polled.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hands a polled record to its task, and pauses its partition once the task's queue for
    /// that side passes its share of `memory.queue_bytes` (resumed by [`Host::resume_drained`]):
    /// whether it paused it now.
    fn queue(&self, source: &Source, run: &mut Running, record: Record) -> Result<bool> {
        let marks = run.marks();
        let (side, p) = (record.side, record.event.partition);
        if !run.large_record_reported && record.event.footprint() > marks.high {
            run.large_record_reported = true;
            Happened::LargeRecord {
                topic: &record.event.topic,
                partition: p,
                offset: record.event.offset,
                bytes: record.event.footprint(),
                share: marks.high,
            }
            .emit(&self.metrics);
        }
        let Some(task) = run.tasks.get_mut(&p) else {
            return Ok(false);
        };
        task.push(side, record.event);
        let paused = task.pause_if_full(side, marks);
        if paused {
            source.pause_side(side, p, "backpressure: its task's queue is full")?;
            Happened::QueueFull {
                task: p,
                side,
                queued: task.queued_bytes(),
                high: marks.high,
            }
            .emit(&self.metrics);
        }
        Ok(paused)
    }

    /// Resumes the partitions paused for backpressure whose queues drained to the low mark.
    fn resume_drained(&self, source: &Source, run: &mut Running) -> Result<()> {
        let marks = run.marks();
        for (&p, task) in run.tasks.iter_mut() {
            for side in task.drained(marks) {
                source.resume_side(side, p)?;
            }
        }
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
    /// tasks' commit points. True when a task stopped at its batch budget (it has more to do).
    fn round(
        &self,
        source: &Source,
        sink: &mut Sink,
        workers: &mut [MeteredAction],
        run: &mut Running,
        started: Instant,
    ) -> Result<bool> {
        let now = started.elapsed().as_millis() as i64;
        let wall_clock = crate::admin::now_ms() as i64;
        let mut running = Vec::new();
        let state_budget = run.state_budget();
        let marks = run.marks();
        for task in run.tasks.values_mut() {
            if task.halted().is_some() {
                continue;
            }
            task.set_state_budget(state_budget);
            // A task's outputs in flight count against its queue share, both sides' worth.
            task.set_batch_budget(2 * marks.high);
            task.set_time_budget(ROUND_TASK_TIME);
            task.set_wall_clock(wall_clock);
            task.set_end_offsets(source.cached_end_offsets(task.partition));
            running.push(task);
        }
        // Meanwhile this thread polls the next round's records.
        let ahead_bytes = backpressure::polled_ahead_bytes(run.queue_bytes) as usize;
        let ahead = &mut run.ahead;
        let mut poll_ahead = |running: &dyn Fn() -> bool| {
            ahead.poll_while(source, running, POLL_PER_ROUND, ahead_bytes)
        };
        let mut batches = pool::run_round_beside(running, workers, now, Some(&mut poll_ahead));
        // A partition revoked meanwhile: its task's points were committed in the callback and
        // the task stops when the rebalance is applied; its batch is not delivered (the next
        // owner makes it again from those points), nor are its points published again.
        let revoked = if run.ahead.rebalance {
            source.revoked_pending()
        } else {
            Default::default()
        };
        if !revoked.is_empty() {
            let dropped: Vec<i32> = batches
                .iter()
                .map(|(p, _)| *p)
                .filter(|p| revoked.contains(p))
                .collect();
            tracing::info!(
                target: "cojoin::report",
                ?dropped,
                "partitions revoked during a round: the batches of its revoked tasks are dropped (their records are the next owner's to read from the committed points)"
            );
            batches.retain(|(p, _)| !revoked.contains(p));
        }
        // Every task's batch is sent, then all are awaited at once: one round trip per round.
        // Meanwhile the consumer is polled, so a broker away does not cost the group membership.
        let ahead = &mut run.ahead;
        match sink.deliver(&mut batches, &mut run.tasks, &mut || {
            ahead.keep_alive(source)
        })? {
            Delivered::Done => {}
            Delivered::Aborted(why) => {
                Happened::TransactionAborted { why: &why }.emit(&self.metrics);
                self.rewind_all(source, run)?;
                return Ok(false);
            }
            Delivered::Fenced(why) => {
                self.renew_producer(&why, source, sink, run)?;
                return Ok(false);
            }
        }
        // A partition revoked by a keep-alive poll: its points are not this host's to publish.
        let revoked = if run.ahead.rebalance {
            source.revoked_pending()
        } else {
            revoked
        };
        let more = batches.iter().any(|(_, b)| b.is_full());
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
            if !revoked.contains(p) {
                source.publish(*p, task.commit_points());
            }
        }
        self.resume_drained(source, run)?;
        Ok(more)
    }

    /// Applies what the rebalance callbacks recorded: stops the tasks that lost a partition,
    /// pauses halves without their pair, starts the tasks whose pair is complete from their
    /// committed offsets and processed-through metadata. Tasks not named keep running with their
    /// state and queue.
    fn apply_rebalance(&self, source: &Source, run: &mut Running) -> Result<()> {
        let rebalanced = source.rebalanced();
        if rebalanced.revoked.is_empty() && rebalanced.assigned.is_empty() && !rebalanced.assignment
        {
            return Ok(());
        }
        let now = crate::admin::now_ms() as i64;
        let (changes, mut settled) =
            run.pairing
                .apply(&rebalanced.revoked, &rebalanced.assigned, now);
        if rebalanced.assignment && rebalanced.assigned.is_empty() {
            settled = settled.or(run.pairing.assigned_nothing(now));
        }
        let numbers = |moved: &[(Side, i32)], side: Side| -> Vec<i32> {
            let mut ps: Vec<i32> = moved
                .iter()
                .filter(|(s, _)| *s == side)
                .map(|(_, p)| *p)
                .collect();
            ps.sort_unstable();
            ps
        };
        if !rebalanced.revoked.is_empty() {
            Happened::PartitionsRevoked {
                left: &numbers(&rebalanced.revoked, Side::Left),
                right: &numbers(&rebalanced.revoked, Side::Right),
            }
            .emit(&self.metrics);
        }
        if rebalanced.assignment {
            let member_id = source.member_id();
            self.metrics.update(|m| m.member_id = member_id);
            let [left, right] = run.pairing.held();
            Happened::Assignment {
                left: &left,
                right: &right,
                added: [
                    &numbers(&rebalanced.assigned, Side::Left),
                    &numbers(&rebalanced.assigned, Side::Right),
                ],
            }
            .emit(&self.metrics);
        }
        for p in &changes.stop {
            if let Some(task) = run.tasks.remove(p) {
                run.retired.add(&task.counters);
                Happened::TaskRevoked { task: *p }.emit(&self.metrics);
            }
        }
        for &(side, p) in &changes.pause {
            source.pause_half(side, p)?;
        }
        if !changes.start.is_empty() {
            let new: Vec<i32> = changes.start.iter().map(|(p, _)| *p).collect();
            let starts = source.committed(&new)?;
            for (p, waited_ms) in changes.start {
                let start = starts[&p];
                // Paused earlier (a lone half, a full queue, a halted task) and librdkafka keeps
                // that across the revoke: seek to the start and fetch again.
                if waited_ms.is_some() || source.is_paused(p) {
                    source.rewind_and_resume(p, &start)?;
                }
                run.waiting_reported.remove(&p);
                Happened::TaskAssigned {
                    task: p,
                    start: &start,
                    waited_ms,
                }
                .emit(&self.metrics);
                let task = run.start_task(source, p, start);
                run.tasks.insert(p, task);
            }
        }
        if let Some(settled) = settled {
            Happened::RebalanceDone {
                took_ms: settled.took_ms,
                tasks: run.tasks.len(),
            }
            .emit(&self.metrics);
        }
        Ok(())
    }

    /// Exactly-once: after a commit, an aborted transaction sends every task back to its last
    /// committed points, and a fenced producer is renewed first.
    fn after_commit(
        &self,
        outcome: Outcome,
        source: &Source,
        sink: &mut Sink,
        run: &mut Running,
    ) -> Result<()> {
        match outcome {
            Outcome::Aborted(_) => self.rewind_all(source, run),
            Outcome::Fatal(why) => self.renew_producer(&why, source, sink, run),
            Outcome::Committed { .. } => {
                run.renewals = 0;
                Ok(())
            }
            Outcome::Nothing => Ok(()),
        }
    }

    /// Exactly-once: the transactional producer was fenced or failed for good (`why`) — the
    /// broker aborts a transaction it finds older than `transaction.timeout.ms`, after a restart
    /// say, and fences its producer. A new one with the same transactional id takes over (its
    /// registration ends the old transaction: no reader sees its outputs), and every task goes
    /// back to its last committed points. A producer fenced again and again without a commit
    /// between is another process with this transactional id (two hosts with the same
    /// `kafka.instance_id`): the host stops.
    fn renew_producer(
        &self,
        why: &str,
        source: &Source,
        sink: &mut Sink,
        run: &mut Running,
    ) -> Result<()> {
        run.renewals += 1;
        if run.renewals > MAX_RENEWALS {
            anyhow::bail!(
                "{why}; the transactional producer was renewed {MAX_RENEWALS} times without a commit between: another process may use this transactional id (two hosts with the same kafka.instance_id?); stopping without committing (a restart resumes from the last commit)"
            );
        }
        Happened::ProducerRenewed { why }.emit(&self.metrics);
        let ahead = &mut run.ahead;
        sink.renew(&mut || ahead.keep_alive(source))?;
        self.rewind_all(source, run)
    }

    /// Restarts every task from its last committed points (their partitions sought back there):
    /// what they did since is in an aborted transaction.
    fn rewind_all(&self, source: &Source, run: &mut Running) -> Result<()> {
        // Polled ahead of the rewind: fetched again from the points.
        let ahead = std::mem::take(&mut run.ahead);
        if ahead.rebalance {
            self.apply_rebalance(source, run)?;
        }
        if let Some(e) = ahead.error {
            return Err(e);
        }
        let held: Vec<i32> = run.tasks.keys().copied().collect();
        if held.is_empty() {
            return Ok(());
        }
        let starts = source.committed(&held)?;
        for p in held {
            if let Some(task) = run.tasks.remove(&p) {
                run.retired.add(&task.counters);
            }
            let start = starts[&p];
            source.rewind_and_resume(p, &start)?;
            let task = run.start_task(source, p, start);
            run.tasks.insert(p, task);
        }
        Ok(())
    }

    /// Says once of each task whose lone half has waited for its pair longer than
    /// [`WAITING_REPORTED_AFTER`].
    fn report_waiting(&self, run: &mut Running) {
        let now = crate::admin::now_ms() as i64;
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        for (p, since) in run.pairing.waiting_since() {
            let waited_ms = now - since;
            if waited_ms >= WAITING_REPORTED_AFTER.as_millis() as i64
                && run.waiting_reported.insert(p)
            {
                Happened::TaskWaiting {
                    task: p,
                    waited_ms,
                    left,
                    right,
                }
                .emit(&self.metrics);
            }
        }
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
                let store = task.store_stats();
                let gauges = TaskGauges {
                    events,
                    bytes,
                    ram_bytes: store.ram_bytes,
                    disk_bytes: store.disk_bytes,
                    queued_bytes: task.queued_bytes(),
                    queued_peak_bytes: task.queued_peak_bytes(),
                    paused: task.paused_sides(),
                    lag,
                };
                (*p, gauges)
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
            m.tasks_waiting = run.pairing.waiting() as u64;
            for (label, stats) in calls {
                m.calls.entry(label).or_default().add(&stats);
            }
        });
    }
}
