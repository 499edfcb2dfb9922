//! The repartition step ([`crate::repartition`] decides which sides): a consumer of the source
//! topics in its own group, `<group>-repartition`, and a producer writing each record re-keyed to
//! its side's internal topic, partitioned by murmur2 of the new key, with the record's timestamp,
//! value and headers (in batches compressed as `output.compression` says). It runs on its own
//! thread beside the join in every host, so it scales out with the hosts like the join does.
//!
//! Order: librdkafka hands out a fetch partition after partition, so written as read, an internal
//! partition would get one source partition's hour and then another's same hour, whose records
//! the join would find late. The step merges the partitions it holds by timestamp instead,
//! waiting `join.max_idle` for one with nothing fetched (as a join task waits for both its
//! partitions). What is left is the disorder between hosts' steps (one lagging behind another,
//! or a partition waiting for the group to move it after a host died): `join.grace` must cover it,
//! as in Kafka Streams (README "Repartitioning").
//!
//! No record is lost: a batch's input offsets are committed only after every write of the batch
//! is acknowledged; a batch with a failed write is read again from its first offsets (duplicates in
//! the internal topic are possible after a failure or a kill, as with any at-least-once step; the
//! join then sees the record twice). With `output.guarantee = "exactly-once"` a batch's writes and
//! its input offsets are one transaction of the step's own transactional producer (as Kafka
//! Streams' repartition step under `exactly_once_v2`): the join, reading `read_committed`, sees
//! each record once, and a step whose partitions moved cannot commit (KIP-447 fencing by the
//! group's generation). A record without a join key (no key, a value that is not
//! JSON or lacks the field) follows `join.null_keys`: dead-lettered with the reason in
//! `cojoin.error.message`, or dropped and logged.
//!
//! A record the broker refuses for good (over the producer's or the internal topic's size limit,
//! a bad timestamp) is written again alone, then dead-lettered ([`refusals`]): one such record
//! used to stall the side for ever behind it. A step whose every batch fails says so in
//! `/readyz`, `/healthz` and `cojoin_repartition_failing_seconds`.
//!
//! The internal topics do not grow forever: every [`TRUNCATE_EVERY`], records the join group has
//! committed past are deleted (DeleteRecords up to the join's committed offset, which is the first
//! offset its recovery reads: its commit points stay behind what its state still needs).
//!
//! Layout: this file runs the step (its thread, the consumer, the batch: poll, merge, write,
//! commit or rewind); the merge itself is pure, [`crate::repartition::merge`]; [`writer`] is the
//! producing side; [`topics`] the admin side (internal topics made, checked and truncated);
//! [`refusals`] and [`unsought`] are the pure bookkeeping of records refused and partitions that
//! could not be sought back.

use crate::stoppable::StoppableThread;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::client;
use super::protocol::Protocol;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::repartition::merge::{Held, Merge, Source, Written};
use crate::repartition::Plan;

mod refusals;
mod topics;
mod unsought;
mod writer;
pub use topics::partition_counts;
use topics::Truncation;
use unsought::Unsought;
use writer::{Fate, Writer};

/// How often records the join has committed past are deleted from the internal topics.
pub const TRUNCATE_EVERY: Duration = Duration::from_secs(10);
use super::timeouts::COORDINATED as TIMEOUT;

/// The running step, until dropped.
/// Dropping it finishes the batch in hand (written and committed) and leaves its group.
pub struct Repartitioner(StoppableThread);

impl Repartitioner {
    /// Creates the internal topics (or checks the partition counts of those that exist), waits
    /// until their metadata shows them, and starts the step.
    pub fn start(
        config: &Config,
        plan: &Plan,
        protocol: Protocol,
        metrics: Arc<Metrics>,
    ) -> Result<Repartitioner> {
        topics::create_internal_topics(config, plan)?;
        let mut consumer_config = client::consumer(&config.kafka, protocol, 64 << 20);
        consumer_config.set("group.id", format!("{}-repartition", config.kafka.group_id));
        let consumer: BaseConsumer<Revocations> = consumer_config
            .create_with_context(Revocations::default())
            .context("creating the repartition consumer")?;
        let sources: Vec<&str> = plan.sides.iter().map(|s| s.source.as_str()).collect();
        consumer
            .subscribe(&sources)
            .context("subscribing the repartition consumer")?;
        let step = Step {
            consumer,
            writer: Writer::new(config, plan)?,
            truncation: Truncation::new(config, plan)?,
            merge: Merge::new(config.join.max_idle),
            metrics,
            unsought: Unsought::default(),
        };
        for side in &plan.sides {
            tracing::info!(
                source = %side.source,
                internal = %side.internal,
                partitions = plan.partitions,
                key = %side.key,
                "repartitioning {} into {}: {}",
                side.source,
                side.internal,
                side.why
            );
        }
        let thread = StoppableThread::spawn("cojoin-repartition", move |stop| step.run(stop))
            .context("starting the repartition thread")?;
        Ok(Repartitioner(thread))
    }

    /// Why the step's thread ended, when it ended without being told to (a panic): the join
    /// would wait for ever on internal topics that no longer fill, so the host must stop. The
    /// run loop asks once per round.
    pub fn stopped(&mut self) -> Option<String> {
        self.0.ended_unasked()
    }
}

/// Partitions revoked since the step last looked. Their held records are dropped then, even when
/// the group gives them straight back (an eager rebalance revokes all and assigns all): the
/// consumer fetches a partition it is given again from its committed offset, so held records
/// kept beside the fetched ones would be written twice.
#[derive(Default)]
struct Revocations(Mutex<Vec<Source>>);

impl ClientContext for Revocations {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        super::quiet::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        super::quiet::error(error, reason);
    }
}

impl ConsumerContext for Revocations {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(
                tpl.elements()
                    .iter()
                    .map(|e| (e.topic().to_owned(), e.partition())),
            );
        }
    }
}

struct Step {
    consumer: BaseConsumer<Revocations>,
    writer: Writer,
    truncation: Truncation,
    /// The records fetched and not yet written, by source partition.
    merge: Merge<OwnedMessage>,
    metrics: Arc<Metrics>,
    /// Partitions a rewind could not seek back (see unsought.rs).
    unsought: Unsought,
}

impl Step {
    fn run(mut self, stop: &AtomicBool) {
        let mut truncated = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if let Err(e) = self.batch() {
                tracing::warn!("repartitioning: {e:#}; the batch is read again");
                self.metrics.repartition_failing_seconds.start();
                std::thread::sleep(Duration::from_secs(1));
            } else {
                self.metrics.repartition_failing_seconds.stop();
            }
            if truncated.elapsed() >= TRUNCATE_EVERY {
                truncated = Instant::now();
                if let Err(e) = self.truncation.run() {
                    tracing::warn!("truncating the internal topics: {e:#}");
                }
            }
        }
        self.consumer.unsubscribe();
    }

    /// Life of a record: polled (held in the merge, by source partition), taken when the merge
    /// lets it go, written re-keyed (or dead-lettered, or dropped), acknowledged, and its offset
    /// committed (in the batch's transaction under exactly-once). A batch that fails is read
    /// again from its first offsets.
    fn batch(&mut self) -> Result<()> {
        let started = Instant::now();
        self.writer.begin_batch();
        self.seek_unsought();
        while !self.merge.is_full() && started.elapsed() < Duration::from_millis(100) {
            let polled = self
                .consumer
                .poll(Duration::from_millis(20))
                .map(|r| r.map(|m| m.detach()));
            // Before queueing what this poll returned: it may be a revoked partition's first
            // record fetched again.
            self.forget_revoked();
            let Some(message) = polled else {
                continue;
            };
            match message {
                // Fetched before its pause: read again once it is sought back.
                Ok(m) if self.unsought.holds(m.topic(), m.partition()) => {}
                Ok(m) => {
                    let at = (m.topic().to_owned(), m.partition());
                    let held = Held {
                        timestamp: m.timestamp().to_millis().unwrap_or(0),
                        offset: m.offset(),
                        record: m,
                    };
                    self.merge.push(at, held, Instant::now());
                }
                Err(e) => tracing::warn!("repartition consumer: {e}"),
            }
        }
        self.follow_assignment();
        let mut written = Written::default();
        let mut fates = [0u64; 3];
        self.merge.begin_round();
        let result = self
            .write_in_order(&mut written, &mut fates)
            .and_then(|()| self.commit(&written));
        self.metrics
            .repartition_held_records
            .set(self.merge.held() as i64);
        if let Err(e) = result {
            self.rewind(&written);
            self.writer.abort(&format!("{e:#}"));
            return Err(e);
        }
        let m = &self.metrics;
        m.repartitioned_records
            .inc_by(fates[Fate::Written as usize]);
        m.repartition_dead_letters
            .inc_by(fates[Fate::DeadLettered as usize]);
        m.repartition_dropped.inc_by(fates[Fate::Dropped as usize]);
        Ok(())
    }

    /// Writes the held records the merge lets go, in timestamp order.
    fn write_in_order(&mut self, written: &mut Written, fates: &mut [u64; 3]) -> Result<()> {
        while let Some(at) = self.merge.choose(Instant::now()) {
            // Before taking the record: a batch failing here leaves it held.
            self.writer.ensure_transaction()?;
            let held = self.merge.take(&at).expect("chosen for its head");
            written.note(at, held.offset);
            let message = held.record;
            let Some(side) = self.writer.side_of(message.topic()) else {
                continue;
            };
            let fate = self
                .writer
                .forward(side, &message)
                .with_context(|| format!("writing {}", writer::position(&message)))?;
            fates[fate as usize] += 1;
        }
        Ok(())
    }

    /// Waits for every write of the batch, then commits its input offsets: in the batch's
    /// transaction under exactly-once, else to the step's group.
    fn commit(&mut self, written: &Written) -> Result<()> {
        if written.is_empty() {
            return Ok(());
        }
        self.writer.acknowledged()?;
        let mut offsets = TopicPartitionList::new();
        for ((topic, partition), next) in written.commits() {
            offsets.add_partition_offset(topic, *partition, Offset::Offset(next))?;
        }
        if !self.writer.is_transactional() {
            if let Err(e) = self.consumer.commit(&offsets, CommitMode::Sync) {
                // A partition moved to another host meanwhile: it reads these records again
                // (the internal topic gets them twice), nothing is lost.
                tracing::info!("repartition commit: {e} (records may be written twice)");
            }
            self.writer.committed();
            return Ok(());
        }
        let group = self
            .consumer
            .group_metadata()
            .context("the repartition consumer has no group metadata yet")?;
        self.writer.commit(&offsets, &group)
    }

    /// Read again from each partition's first record written: what is held behind it is read
    /// again too. A partition that cannot be sought back waits, paused, until it can
    /// ([`Unsought`]): going on from the fetch position would commit past records never written.
    fn rewind(&mut self, written: &Written) {
        for ((topic, partition), first) in self.merge.rewind(written) {
            let at = Offset::Offset(first);
            if let Err(e) = self.consumer.seek(&topic, partition, at, TIMEOUT) {
                tracing::warn!(
                    "repartitioning: cannot go back to offset {first} of {topic} [{partition}]: {e}; the partition waits, paused, until it can"
                );
                self.unsought.failed(&topic, partition, first);
                self.pause_or_resume(&topic, partition, true);
            }
        }
    }

    /// Seeks again the partitions a rewind could not seek back, and resumes those it can now.
    fn seek_unsought(&mut self) {
        let consumer = &self.consumer;
        let sought = self.unsought.retry(|topic, p, offset| {
            match consumer.seek(topic, p, Offset::Offset(offset), TIMEOUT) {
                Ok(()) => true,
                // Warned once when it first failed; it is tried every batch.
                Err(e) => {
                    tracing::debug!("repartitioning: going back to offset {offset} of {topic} [{p}]: {e}; tried again");
                    false
                }
            }
        });
        for (topic, p, offset) in sought {
            if self.pause_or_resume(&topic, p, false) {
                tracing::info!(
                    "repartitioning: {topic} [{p}] went back to where it failed; resumed"
                );
            } else {
                // Still paused: it would never be fetched again. Sought and resumed next batch.
                self.unsought.failed(&topic, p, offset);
            }
        }
    }

    /// Pauses or resumes fetching `partition` of `topic`; whether it did.
    fn pause_or_resume(&self, topic: &str, partition: i32, pause: bool) -> bool {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let done = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        // Paused or not, its records are dropped while it waits (Unsought::holds).
        if let Err(e) = &done {
            let what = if pause { "pausing" } else { "resuming" };
            tracing::warn!("repartitioning: {what} {topic} [{partition}]: {e}");
        }
        done.is_ok()
    }

    /// Drops the held records of the partitions revoked since the last look (see
    /// [`Revocations`]).
    fn forget_revoked(&mut self) {
        let revoked = std::mem::take(
            &mut *self
                .consumer
                .context()
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        self.unsought.forget(&revoked);
        self.merge.forget(&revoked);
    }

    /// Queues for the partitions the group gives this step now: a revoked partition's held
    /// records are dropped (not committed, so its new owner reads them), a new one waits
    /// `max_idle` for its first records before the merge goes on without it.
    fn follow_assignment(&mut self) {
        let assigned = match self.consumer.assignment() {
            Ok(assigned) => assigned,
            Err(e) => {
                // The queues stay as they are; the next batch asks again.
                tracing::warn!("repartitioning: reading the consumer's assignment: {e}");
                return;
            }
        };
        let assigned: HashSet<Source> = assigned
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        let new = self.merge.follow(&assigned);
        if !new.is_empty() {
            // Where each new partition starts: its committed offset (none: from the beginning).
            let mut tpl = TopicPartitionList::new();
            for (topic, p) in &new {
                tpl.add_partition(topic, *p);
            }
            let committed = match self.consumer.committed_offsets(tpl, TIMEOUT) {
                Ok(committed) => Some(committed),
                Err(e) => {
                    // They start as if nothing were committed: only how long the merge waits
                    // for their first records depends on it (Merge::note_watermarks).
                    tracing::warn!("repartitioning: reading the committed offsets of newly assigned partitions: {e}");
                    None
                }
            };
            let now = Instant::now();
            for at in new {
                let next = committed
                    .as_ref()
                    .and_then(|c| c.find_partition(&at.0, at.1))
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    });
                self.merge.start(at, next, now);
            }
        }
        self.merge
            .note_watermarks(|(topic, p)| client::cached_watermarks(&self.consumer, topic, *p));
    }
}

#[cfg(test)]
mod tests;
