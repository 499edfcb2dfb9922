//! Commit points: where a new task starts (read back from the group), what the tasks publish as
//! they go, and committing that — through the consumer, or exactly-once through the open
//! transaction — with each commit's or transaction's outcome counted and logged. The revoke
//! callback ([`super::rebalance`]) commits with the same helpers.

use std::collections::HashMap;

use anyhow::{Context as _, Result};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{lock, Source};
use crate::join::CommitPoint;
use crate::kafka::transaction::{KeepAlive, Outcome};
use crate::metrics::Metrics;
use crate::report::Happened;

/// How often a commit's wait polls the consumer (and looks for the answer).
const POLLED_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Counts and logs a transaction's outcome.
pub(super) fn report_transaction(metrics: &Metrics, outcome: &Outcome, on_revoke: bool) {
    match outcome {
        Outcome::Committed { took } => Happened::TransactionCommitted {
            took: *took,
            on_revoke,
        }
        .emit(metrics),
        Outcome::Aborted(why) => Happened::TransactionAborted { why }.emit(metrics),
        Outcome::Nothing | Outcome::Fatal(_) => {}
    }
}

/// Counts and logs a commit's outcome. Every commit is synchronous, so its outcome is known
/// where it is made: librdkafka reports the outcome of an asynchronous manual commit to no one
/// unless an `offset_commit_cb` is configured, which rdkafka's event-based consumer does not do.
pub(super) fn report_commit(
    metrics: &Metrics,
    result: rdkafka::error::KafkaResult<()>,
    on_revoke: bool,
    partitions: usize,
) {
    match result {
        Ok(()) => Happened::Committed {
            partitions,
            on_revoke,
        }
        .emit(metrics),
        // Nothing new to commit since the last one: not a failure.
        Err(rdkafka::error::KafkaError::ConsumerCommit(
            rdkafka::types::RDKafkaErrorCode::NoOffset,
        )) => {}
        Err(e) => Happened::CommitFailed {
            partitions,
            on_revoke,
            error: &e,
        }
        .emit(metrics),
    }
}

pub(super) fn commit_list(
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

impl Source {
    /// The committed points of partition p of every topic, for each p in `tasks`: where a new
    /// task starts (offset 0 and nothing processed when nothing was committed); an error when the
    /// coordinator does not answer within `timeout`.
    pub fn committed(
        &self,
        tasks: &[i32],
        timeout: std::time::Duration,
    ) -> Result<HashMap<i32, Vec<CommitPoint>>> {
        let mut wanted = TopicPartitionList::new();
        for &p in tasks {
            for topic in &self.topics {
                wanted.add_partition(topic, p);
            }
        }
        let committed = self
            .consumer
            .committed_offsets(wanted, timeout)
            .context("reading the committed offsets of the tasks to start")?;
        let fresh = vec![CommitPoint::new(0, [], None); self.topics.len()];
        let mut starts: HashMap<i32, Vec<CommitPoint>> =
            tasks.iter().map(|&p| (p, fresh.clone())).collect();
        for e in committed.elements() {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            let side = super::side_of(&self.topics, e.topic()).index();
            if let Some(start) = starts.get_mut(&e.partition()) {
                // A table is restored from its beginning; what it processed before is replay
                // (its rejected records are not dead-lettered again).
                let offset = if self.from_start == Some(side) {
                    0
                } else {
                    offset
                };
                start[side] = CommitPoint {
                    offset,
                    processed_through: CommitPoint::parse_metadata(e.metadata()),
                };
            }
        }
        Ok(starts)
    }

    /// Drops the points published for `tasks`: exactly-once, they belonged to an aborted
    /// transaction, and a commit before the tasks publish again (the loop's next one, or a revoke
    /// callback's) would carry offsets past outputs no reader will see.
    pub fn unpublish(&self, tasks: &[i32]) {
        let mut s = lock(&self.shared);
        s.points.retain(|(_, p), _| !tasks.contains(p));
    }

    /// Records what task p would commit now for the left and the right partition; the next
    /// [`Source::commit`] (or a revoke) commits it.
    pub fn publish(&self, p: i32, points: &[CommitPoint]) {
        let mut s = lock(&self.shared);
        for (topic, &point) in self.topics.iter().zip(points) {
            s.points.insert((topic.to_string(), p), point);
        }
    }

    /// Commits `list` and waits for the broker's answer, `keep_alive` polling the consumer
    /// meanwhile. librdkafka holds a commit while the group coordinator is unavailable, up to
    /// the session timeout (45 s by default), and a synchronous commit waits all that time: a
    /// host committing while the broker restarted was not polled for `max.poll.interval.ms` and
    /// left the group (kafka_eos, under two CPU hogs). So the commit waits on a thread beside.
    fn commit_polling(
        &self,
        list: &TopicPartitionList,
        keep_alive: KeepAlive<'_>,
    ) -> rdkafka::error::KafkaResult<()> {
        std::thread::scope(|s| {
            let (answered, answer) = std::sync::mpsc::sync_channel(1);
            s.spawn(move || {
                let _ = answered.send(self.consumer.commit(list, CommitMode::Sync));
            });
            loop {
                match answer.recv_timeout(POLLED_EVERY) {
                    Ok(result) => return result,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => keep_alive(),
                    // The thread ended without an answer: it panicked, and the scope panics with
                    // it when it ends (this error is never seen).
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(rdkafka::error::KafkaError::ConsumerCommit(
                            rdkafka::types::RDKafkaErrorCode::Fail,
                        ))
                    }
                }
            }
        })
    }

    /// Commits every published point and waits for the broker's answer (a round trip a
    /// second; Kafka Streams commits synchronously too). A failure is logged and counted: the
    /// next commit retries, and a restart would replay more.
    ///
    /// Exactly-once: commits the open transaction with the points instead, and returns how it
    /// ended — also when a revoke callback's commit failed since the last call. `Aborted` means
    /// the tasks must go back to their last committed points; `Fatal`, that this host may not
    /// produce again.
    ///
    /// While it waits on the broker, `keep_alive` polls the consumer (and exactly-once marks the
    /// transaction as waiting: see `Shared::doomed`).
    pub fn commit(&self, keep_alive: KeepAlive<'_>) -> Outcome {
        let points: Vec<_> = {
            let s = lock(&self.shared);
            s.points.iter().map(|(k, v)| (k.clone(), *v)).collect()
        };
        let Some(txn) = &self.transactions else {
            if points.is_empty() {
                return Outcome::Nothing;
            }
            let count = points.len();
            let result = self.commit_polling(&commit_list(points), keep_alive);
            report_commit(&self.metrics, result, false, count);
            return Outcome::Nothing;
        };
        if let Some(failed) = lock(&self.shared).transaction_failed.take() {
            return failed;
        }
        let _waiting = txn.waiting();
        let doomed = lock(&self.shared).doomed.take();
        if let Some(why) = doomed {
            let outcome = txn.abort(&why, keep_alive);
            report_transaction(&self.metrics, &outcome, false);
            return outcome;
        }
        let unchanged = {
            let s = lock(&self.shared);
            points.len() == s.committed.len()
                && points.iter().all(|(k, v)| s.committed.get(k) == Some(v))
        };
        if unchanged && !txn.is_open() {
            return Outcome::Nothing;
        }
        let outcome = match self.consumer.group_metadata() {
            Some(group) => txn.commit(&commit_list(points.iter().cloned()), &group, keep_alive),
            None => txn.abort("no consumer group metadata to commit with", keep_alive),
        };
        if let Outcome::Committed { .. } = outcome {
            let mut s = lock(&self.shared);
            s.committed = points.into_iter().collect();
            // Partitions revoked meanwhile had their points in this transaction: nothing of
            // theirs is left open.
            s.doomed = None;
        }
        report_transaction(&self.metrics, &outcome, false);
        outcome
    }
}
