//! The consumer side of a host, owned in one place: the consumer ([`Source`]), the pairing of
//! its partitions into tasks, the one set of partitions it paused ([`paused`]), the records
//! polled while a round ran ([`ahead`]), seeks and rewinds. It hands the run loop's tasks their
//! records, starts and stops them as the group moves partitions ([`rebalance`]), and takes back
//! their commit points.
//!
//! The tasks are the loop's: the intake sees them through [`Tasks`] (queue a record, its side's
//! queued bytes, start, stop), so that the Kafka side needs nothing of the task runtime.
//!
//! The life of a record here: polled (now, or while the last round ran), handed to the task of
//! its partition number — or dropped when no task holds it (a lone half: fetched again once its
//! pair comes) — and its partition paused once the task's queue for that side passes its share of
//! `memory.queue_bytes`, resumed when it drained to half of that.

pub mod ahead;
mod asks;
pub mod paused;
mod rebalance;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::event::Side;
use crate::join::CommitPoint;
use crate::kafka::pairing::Pairing;
use crate::kafka::source::{InstanceIdHeld, Record, Source};
use crate::kafka::transaction::{no_keep_alive, Outcome};
use crate::metrics::Metrics;
use crate::report::Happened;
use crate::task::backpressure::{self, QueueMarks};
use ahead::Polled;
use paused::{Pause, Paused};

/// Records polled at most per round, so that rounds (and commits) keep coming under a backlog.
pub const POLL_PER_ROUND: usize = 10_000;
/// How long a round waits for the broker's end offsets of the sides its tasks would go on
/// without: the tasks wait meanwhile anyway; one not answered is asked again next round.
pub const END_OFFSET_ASKED: Duration = Duration::from_secs(1);
/// How long each side waits when asked alone, after the batch went unanswered.
const END_OFFSET_ASKED_ALONE: Duration = Duration::from_millis(200);

/// End offsets the broker gave ([`Intake::end_offsets_within`]), and why one was not.
#[derive(Default)]
struct EndOffsets {
    given: HashMap<(i32, Side), i64>,
    refused: Option<String>,
}

/// The run loop's tasks, as the intake feeds them. Task p is partition p of both topics.
pub trait Tasks {
    /// How many tasks run.
    fn count(&self) -> usize;
    /// The partition numbers of the tasks that run.
    fn held(&self) -> Vec<i32>;
    /// Queues a record in the task of its partition: the bytes queued on its side after it, or
    /// `None` when no task holds the partition (the record is dropped).
    fn queue(&mut self, record: Record) -> Option<usize>;
    /// Bytes queued on one side of task p; `None` when no task runs p or it halted.
    fn queued_bytes(&self, p: i32, side: Side) -> Option<usize>;
    /// Stops task p (a partition of it went, or it restarts): whether one ran.
    fn stop(&mut self, p: i32) -> bool;
    /// Starts task p at its committed points; `end_offsets` are what the broker reports now (the
    /// floor below which the consumer's cached end offsets are stale).
    fn start(&mut self, p: i32, start: Vec<CommitPoint>, end_offsets: Vec<i64>);
}

/// Makes the consumer again (a static member whose id the broker still holds).
pub type Remake = Box<dyn Fn() -> Result<Source>>;

pub struct Intake {
    source: Source,
    /// A client of its own for the end offsets tasks ask ([`Intake::end_offsets_now`], and at a
    /// task's start: kafka/intake/asks.rs): asked on
    /// the consumer's connection, an answer waited behind its fetch long-poll (~500 ms each,
    /// measured: 6 asks took 3 s of a 0.6 s benchmark).
    watermarks: BaseConsumer,
    remake: Remake,
    /// Which partitions this host holds, and which tasks are active (both halves held).
    pairing: Pairing,
    paused: Paused,
    /// Records polled while the last round ran, not yet handed to their tasks.
    ahead: Polled,
    metrics: Arc<Metrics>,
    /// `memory.queue_bytes`, shared by the tasks held (task/backpressure.rs).
    queue_bytes: u64,
    /// Records handed to tasks (or dropped for want of one), per side.
    consumed: Vec<u64>,
    /// Tasks already reported as waiting for their pair.
    waiting_reported: BTreeSet<i32>,
    /// A record larger than a task side's queue share was reported (once per host).
    large_record_reported: bool,
    /// Times the consumer was made again because the broker still held its static member id.
    id_held_attempts: u32,
}

impl Intake {
    /// The consumer side of a host, its consumer subscribed already; `eager`: the classic
    /// protocol (every rebalance revokes everything).
    pub fn new(
        source: Source,
        watermarks: BaseConsumer,
        remake: Remake,
        eager: bool,
        queue_bytes: u64,
        metrics: Arc<Metrics>,
    ) -> Self {
        let topics = source.topic_count();
        Intake {
            source,
            watermarks,
            remake,
            pairing: Pairing::with_topics(topics, eager),
            paused: Paused::default(),
            ahead: Polled::default(),
            metrics,
            queue_bytes,
            consumed: vec![0; topics],
            waiting_reported: BTreeSet::new(),
            large_record_reported: false,
            id_held_attempts: 0,
        }
    }

    /// Hands the records polled during the last round to their tasks, then polls what is there
    /// (at most [`POLL_PER_ROUND`] in all), waiting at most `wait` for the first; rebalances are
    /// applied as the polls bring them. Returns how long it waited for the first.
    pub fn poll(&mut self, tasks: &mut impl Tasks, wait: Duration) -> Result<Duration> {
        let ahead = self.ahead.len();
        let mut waited = Duration::ZERO;
        self.hand_over(tasks)?;
        for polled in ahead..POLL_PER_ROUND {
            // A task's start polled while it asked the broker (kafka/intake/asks.rs): what it
            // polled is handed over first, by the next poll.
            if self.ahead.holds_anything() {
                break;
            }
            let wait = if polled == 0 { wait } else { Duration::ZERO };
            // Timed only when it may wait: a clock read per record was 3 % of cojoin-noop's CPU.
            let asked = (!wait.is_zero()).then(Instant::now);
            let polled_one = self.source.poll(wait);
            if let Some(asked) = asked {
                waited = asked.elapsed();
            }
            let record = match polled_one {
                // A static member restarted after a kill -9 under the consumer protocol: the
                // broker releases its id at the old member's session timeout. Until then a new
                // consumer asks again, backing off (it holds no task yet).
                Err(e) if e.is::<InstanceIdHeld>() && tasks.count() == 0 => {
                    let attempt = self.id_held_attempts;
                    self.id_held_attempts += 1;
                    if attempt == 0 {
                        tracing::warn!("{e}; asking again until it is released");
                    }
                    // 1, 2, 4, then every 8 s (the broker's default timeout is 45 s).
                    std::thread::sleep(Duration::from_secs(1 << attempt.min(3)));
                    self.source = (self.remake)()?;
                    self.paused.clear();
                    self.source.subscribe()?;
                    break;
                }
                record => record?,
            };
            self.apply_rebalance(tasks)?;
            let Some(record) = record else { break };
            self.queue(tasks, record)?;
        }
        Ok(waited)
    }

    /// Polls while `running()` (the workers run a round), up to [`POLL_PER_ROUND`] records and
    /// the budget's share for them; stops at a rebalance or an error. Handed over by the next
    /// [`Intake::poll`].
    pub fn poll_ahead(&mut self, running: &dyn Fn() -> bool) {
        let max_bytes = backpressure::polled_ahead_bytes(self.queue_bytes) as usize;
        self.ahead
            .poll_while(&self.source, running, POLL_PER_ROUND, max_bytes);
    }

    /// One poll without waiting, while the loop waits on the broker (a delivery, a commit, a
    /// task's start): librdkafka leaves the group when the consumer is not polled for
    /// `max.poll.interval.ms`.
    pub fn keep_alive(&mut self) {
        self.ahead.keep_alive(&self.source);
    }

    /// The tasks with a partition revoked by a poll since the last rebalance was applied (while
    /// a round ran, or while the loop waited on the broker): their points were committed in the
    /// callback and they stop when the rebalance is applied; their batches are not delivered and
    /// their points not published again.
    pub fn revoked_meanwhile(&self) -> BTreeSet<i32> {
        if self.ahead.rebalance {
            self.source.revoked_pending()
        } else {
            BTreeSet::new()
        }
    }

    /// Hands the records polled during the last round to their tasks, in the order the loop
    /// would have (see [`ahead`]). A side its task's queue pauses meanwhile takes none of its
    /// later records: its partition is moved back to the first of them, fetched again on resume.
    fn hand_over(&mut self, tasks: &mut impl Tasks) -> Result<()> {
        // A task with a partition revoked meanwhile stops when the rebalance is applied: its
        // records are the next owner's to read from the committed points (as the loop drops
        // what it polls for a task it does not hold).
        let revoked = self.revoked_meanwhile();
        let polled = std::mem::take(&mut self.ahead);
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
            if self.queue(tasks, record)? {
                held_back.insert(at, None);
            }
        }
        // Sides sought back to their first record not taken: what was polled of them after the
        // rebalance is fetched again too.
        let mut sought = HashSet::new();
        for ((side, p), first) in held_back {
            if let Some(offset) = first {
                self.source.seek_side(side, p, offset)?;
                sought.insert((side, p));
            }
        }
        let rewound = if polled.rebalance {
            self.apply_rebalance(tasks)?
        } else {
            BTreeSet::new()
        };
        for record in polled.after {
            let (side, p) = (record.side, record.event.partition);
            // A task started sought back to its points fetches these again.
            if sought.contains(&(side, p)) || rewound.contains(&p) {
                continue;
            }
            self.queue(tasks, record)?;
        }
        match polled.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The marks of each task's queue (task/backpressure.rs).
    fn marks(&self, tasks: &impl Tasks) -> QueueMarks {
        QueueMarks::new(self.queue_bytes, tasks.count(), self.consumed.len())
    }

    /// Hands a polled record to its task, and pauses its partition once the task's queue for
    /// that side passes its high mark (resumed by [`Intake::resume_drained`]): whether it
    /// paused it now.
    fn queue(&mut self, tasks: &mut impl Tasks, record: Record) -> Result<bool> {
        let marks = self.marks(tasks);
        let (side, p) = (record.side, record.event.partition);
        self.consumed[side.index()] += 1;
        if !self.large_record_reported && record.event.footprint() > marks.high {
            self.large_record_reported = true;
            Happened::LargeRecord {
                topic: &record.event.topic,
                partition: p,
                offset: record.event.offset,
                bytes: record.event.footprint(),
                share: marks.high,
            }
            .emit(&self.metrics);
        }
        let Some(queued) = tasks.queue(record) else {
            return Ok(false);
        };
        // Per record: one lookup, not every side's in a new vector.
        if !marks.must_pause(queued, self.paused.is_backpressured(side, p)) {
            return Ok(false);
        }
        self.pause(side, p, Pause::Backpressure)?;
        Happened::QueueFull {
            task: p,
            side,
            queued,
            high: marks.high,
        }
        .emit(&self.metrics);
        Ok(true)
    }

    /// Pauses one partition (librdkafka is told once) and records why.
    fn pause(&mut self, side: Side, p: i32, why: Pause) -> Result<()> {
        if self.paused.pause(side, p, why) {
            self.source.pause_side(side, p, why.why())?;
        }
        Ok(())
    }

    /// Resumes the partitions paused for backpressure whose queues drained to the low mark. A
    /// halted task's stay paused.
    pub fn resume_drained(&mut self, tasks: &impl Tasks) -> Result<()> {
        let marks = self.marks(tasks);
        for (side, p) in self.paused.backpressured_sides() {
            if tasks
                .queued_bytes(p, side)
                .is_some_and(|bytes| marks.may_resume(bytes))
                && self.paused.resume(side, p)
            {
                self.source.resume_side(side, p)?;
            }
        }
        Ok(())
    }

    /// Pauses every partition of a task that halted (`plugin.failure = "halt"`).
    pub fn halt(&mut self, p: i32) -> Result<()> {
        for side in Side::all(self.source.topic_count()) {
            self.pause(side, p, Pause::Halted)?;
        }
        Ok(())
    }

    /// Which sides of task p are paused for backpressure (the task waits for an empty one).
    pub fn backpressured(&self, p: i32) -> Vec<bool> {
        self.paused.backpressured(p, self.source.topic_count())
    }

    /// End offsets of task p's partitions as the consumer last saw them in a fetch response.
    pub fn end_offsets_seen(&self, p: i32) -> Vec<Option<i64>> {
        self.source.cached_end_offsets(p)
    }

    /// The consumer's positions ([`Source::positions`]) of the sides none of whose polled
    /// records wait here to be handed over: there every record before the position is with its
    /// task.
    pub fn positions(&self) -> HashMap<(i32, Side), i64> {
        let mut at = self.source.positions();
        for r in self.ahead.before.iter().chain(&self.ahead.after) {
            at.remove(&(r.event.partition, r.side));
        }
        at
    }

    /// The end offsets of the `wanted` sides of tasks as the broker reports them now (see
    /// [`Intake::end_offsets_within`]), waiting at most [`END_OFFSET_ASKED`]; a side missing
    /// from the answer was not given (said once in a while).
    ///
    /// librdkafka answers a batched ask all or nothing: one partition whose leader is away (or
    /// slow) would leave every task without its answer, waiting. So when the batch fails each
    /// side is asked alone, briefly ([`END_OFFSET_ASKED_ALONE`]), the consumer polled between:
    /// the tasks whose partitions answer go on.
    pub fn end_offsets_now(&mut self, wanted: &[(i32, Side)]) -> HashMap<(i32, Side), i64> {
        let mut answer = self.end_offsets_within(wanted, END_OFFSET_ASKED);
        if answer.given.len() < wanted.len() && wanted.len() > 1 {
            for side in wanted {
                if answer.given.contains_key(side) {
                    continue;
                }
                self.keep_alive();
                let alone =
                    self.end_offsets_within(std::slice::from_ref(side), END_OFFSET_ASKED_ALONE);
                answer.given.extend(alone.given);
            }
        }
        if let Some((p, side)) = wanted.iter().find(|w| !answer.given.contains_key(w)) {
            let topic = self.source.topic(*side);
            let why = answer.refused.as_deref().unwrap_or("not in the answer");
            if let Some(said) = crate::quiet::said("end offset asked", || {
                format!("the end offset of {topic}/{p} was asked and not given ({why}); the task waits for that partition and asks again (for at most {} s before it goes on without it)", crate::join::BACKLOG_WAIT_MS / 1000)
            }) {
                tracing::warn!("{said}");
            }
        }
        answer.given
    }

    /// The end offsets of the `wanted` sides of tasks as the broker reports them now (the log
    /// end: the client asks read_uncommitted, so a transaction still open counts), asked on the
    /// client of its own all together:
    /// one ListOffsets request per leader, waiting at most `wait` (a side asked alone, with its
    /// low watermark too, cost two requests per side).
    fn end_offsets_within(&self, wanted: &[(i32, Side)], wait: Duration) -> EndOffsets {
        let mut asked = TopicPartitionList::new();
        for &(p, side) in wanted {
            // Only an invalid offset is refused here, and End is valid.
            let _ = asked.add_partition_offset(self.source.topic(side), p, Offset::End);
        }
        let mut answer = EndOffsets::default();
        let listed = match self.watermarks.offsets_for_times(asked, wait) {
            Ok(listed) => listed,
            Err(e) => {
                answer.refused = Some(e.to_string());
                return answer;
            }
        };
        for &(p, side) in wanted {
            let topic = self.source.topic(side);
            match listed
                .find_partition(topic, p)
                .map(|e| (e.error(), e.offset()))
            {
                Some((Ok(()), Offset::Offset(end))) => {
                    answer.given.insert((p, side), end);
                }
                Some((Err(e), _)) => {
                    answer
                        .refused
                        .get_or_insert_with(|| format!("{topic}/{p}: {e}"));
                }
                Some((Ok(()), other)) => {
                    answer
                        .refused
                        .get_or_insert_with(|| format!("{topic}/{p}: {other:?}"));
                }
                None => {}
            }
        }
        answer
    }

    /// Records what task p would commit now; the next commit (or a revoke) commits it.
    pub fn publish(&self, p: i32, points: &[CommitPoint]) {
        self.source.publish(p, points);
    }

    /// Commits what the tasks published (see [`Source::commit`]), polling to keep the group
    /// membership while it waits on the broker.
    pub fn commit(&mut self) -> Outcome {
        let Intake { source, ahead, .. } = self;
        source.commit(&mut || ahead.keep_alive(source))
    }

    /// Restarts every task from its last committed points (their partitions sought back there):
    /// what they did since is in an aborted transaction.
    pub fn rewind_all(&mut self, tasks: &mut impl Tasks) -> Result<()> {
        // Polled ahead of the rewind: fetched again from the points.
        let ahead = std::mem::take(&mut self.ahead);
        if ahead.rebalance {
            self.apply_rebalance(tasks)?;
        }
        if let Some(e) = ahead.error {
            return Err(e);
        }
        let held = tasks.held();
        if held.is_empty() {
            return Ok(());
        }
        // What the tasks published went with the aborted transaction: nothing of theirs is
        // committed (by the loop, or a revoke callback in the polls below) until they publish
        // again, from their committed points.
        self.source.unpublish(&held);
        let starts = self.committed_points(&held)?;
        let ends = self.end_offsets_at_start(&held);
        for p in held {
            tasks.stop(p);
            // Revoked by a poll while the points were asked: the next owner's, stopped here.
            if self.revoked_meanwhile().contains(&p) {
                continue;
            }
            let start = starts[&p].clone();
            self.source.rewind_and_resume(p, &start)?;
            self.ahead.forget(p);
            self.paused.clear_task(p);
            self.source.publish(p, &start);
            tasks.start(p, start, ends[&p].clone());
        }
        Ok(())
    }

    /// Records behind the high watermark per task and side.
    pub fn lag(&self, tasks: &impl Tasks) -> HashMap<i32, Vec<Option<i64>>> {
        self.source.lag(tasks.held().into_iter())
    }

    /// Records handed over per side, since the start.
    pub fn consumed(&self) -> &[u64] {
        &self.consumed
    }

    /// Lone halves: how many wait for their pair.
    pub fn waiting(&self) -> usize {
        self.pairing.waiting()
    }

    /// Commits what the tasks published without polling (the host is leaving) and leaves the
    /// group: how the last commit ended.
    pub fn leave(self) -> Outcome {
        let outcome = self.source.commit(&mut no_keep_alive);
        self.source.close();
        outcome
    }
}
