//! Rebalances: the state the rebalance callbacks share with the run loop ([`Shared`]), the
//! consumer context whose callbacks record what moved and commit a revoked task's points before
//! its partitions go (exactly-once: end the open transaction), and the changes the loop takes
//! from them after each poll ([`Rebalanced`]). The same context keeps librdkafka's repeated
//! complaint about a held instance id out of the error log (see [`super::InstanceIdHeld`]).
//!
//! Apart from the rest of the source because the callbacks run inside `poll`, on librdkafka's
//! terms; what they commit with is in [`super::commit`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;

use super::commit::{commit_list, report_commit, report_transaction};
use super::lock;
use super::Source;
use crate::event::Side;
use crate::join::CommitPoint;
use crate::kafka::sink::SinkTransactions;
use crate::kafka::transaction::{no_keep_alive, Outcome};
use crate::metrics::Metrics;

/// What the rebalance callbacks and the loop share. Locked only briefly, never across I/O other
/// than the revoke commit (which must happen before the partitions go).
#[derive(Default)]
pub(super) struct Shared {
    /// The latest commit point of every held partition, as the tasks published them.
    pub(super) points: HashMap<(String, i32), CommitPoint>,
    /// Partitions that came and went since the loop last asked, in callback order.
    pub(super) assigned: Vec<(String, i32)>,
    pub(super) revoked: Vec<(String, i32)>,
    /// An assignment callback ran (under the classic protocol it can be empty).
    pub(super) assignment: bool,
    /// Exactly-once: the revoke callback's transaction was aborted or failed for good.
    pub(super) transaction_failed: Option<Outcome>,
    /// Exactly-once: the points of the last committed transaction (an idle host commits none).
    pub(super) committed: HashMap<(String, i32), CommitPoint>,
    /// Exactly-once: partitions were revoked while the loop waited on the broker (a poll to keep
    /// its membership), without a commit: the open transaction holds outputs of their tasks and
    /// must be aborted before anything else is committed (why).
    pub(super) doomed: Option<String>,
}

pub(super) struct RebalanceContext {
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) topics: Vec<Arc<str>>,
    pub(super) transactions: Option<Arc<SinkTransactions>>,
}

impl ClientContext for RebalanceContext {
    // An instance id still held (see [`super::InstanceIdHeld`]) is expected while the run loop waits
    // for the broker to release it: said once by the loop, not at error level per attempt.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if message.contains(INSTANCE_ID_HELD) {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
        } else {
            crate::kafka::quiet::log(level, fac, message);
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if reason.contains(INSTANCE_ID_HELD) {
            tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        } else {
            crate::kafka::quiet::error(error, reason);
        }
    }
}

/// The broker's words for `UNRELEASED_INSTANCE_ID`.
const INSTANCE_ID_HELD: &str = "instance ID is still used by another member";

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let mut shared = lock(&self.shared);
            let revoked: Vec<(String, i32)> = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_owned(), e.partition()))
                .collect();
            // A task ends when either of its partitions goes: its points on both topics are
            // committed now (the half that stays is paused until its pair comes back, and then
            // starts from here).
            let partitions: std::collections::BTreeSet<i32> =
                revoked.iter().map(|(_, p)| *p).collect();
            let task_partitions: Vec<(String, i32)> = partitions
                .iter()
                .flat_map(|&p| self.topics.iter().map(move |t| (t.to_string(), p)))
                .collect();
            match &self.transactions {
                // Called from a poll the run loop makes while it waits on the broker: the open
                // transaction is that call's to end, and it may not be committed now (see
                // `Shared::doomed`); the next commit aborts it, the new owners start from the
                // last commit.
                Some(txn) if txn.is_waiting() => {
                    for tp in &task_partitions {
                        shared.points.remove(tp);
                    }
                    shared.doomed.get_or_insert_with(|| {
                        format!("partitions {partitions:?} were revoked while the host waited on the broker")
                    });
                }
                // Exactly-once: the open transaction is committed with every task's points
                // before the partitions go (its outputs are the revoked tasks' too).
                Some(txn) => {
                    let all = commit_list(shared.points.iter().map(|(k, v)| (k.clone(), *v)));
                    let outcome = match (shared.doomed.take(), consumer.group_metadata()) {
                        (Some(why), _) => txn.abort(&why, &mut no_keep_alive),
                        (None, Some(group)) => txn.commit(&all, &group, &mut no_keep_alive),
                        (None, None) => txn.abort(
                            "no consumer group metadata to commit with",
                            &mut no_keep_alive,
                        ),
                    };
                    for tp in &task_partitions {
                        shared.points.remove(tp);
                    }
                    report_transaction(&self.metrics, &outcome, true);
                    if matches!(outcome, Outcome::Aborted(_) | Outcome::Fatal(_)) {
                        shared.transaction_failed.get_or_insert(outcome);
                    }
                }
                None => {
                    let points = task_partitions
                        .iter()
                        .filter_map(|tp| shared.points.remove(tp).map(|p| (tp.clone(), p)));
                    let commit = commit_list(points);
                    if commit.count() > 0 {
                        let result = consumer.commit(&commit, CommitMode::Sync);
                        report_commit(&self.metrics, result, true, commit.count());
                    }
                }
            }
            shared.revoked.extend(revoked);
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut shared = lock(&self.shared);
        match rebalance {
            Rebalance::Assign(tpl) => {
                let elements = tpl.elements();
                let assigned = elements
                    .iter()
                    .map(|e| (e.topic().to_owned(), e.partition()));
                shared.assigned.extend(assigned);
                shared.assignment = true;
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::error!("rebalance error: {e}"),
        }
    }
}

/// What changed in the group since the last call, as deltas: the classic eager protocol revokes
/// every partition and then assigns every partition; the new protocol moves a few at a time.
#[derive(Debug, Default)]
pub struct Rebalanced {
    pub revoked: Vec<(Side, i32)>,
    pub assigned: Vec<(Side, i32)>,
    /// An assignment came (possibly empty, under the classic protocol).
    pub assignment: bool,
}

impl Source {
    /// Whether a rebalance callback ran since the loop last took the changes
    /// ([`Source::rebalanced`]).
    pub fn rebalance_pending(&self) -> bool {
        let s = lock(&self.shared);
        !s.revoked.is_empty() || !s.assigned.is_empty() || s.assignment
    }

    /// The tasks (partition numbers) with a partition revoked since the loop last took the
    /// changes: their points are no longer this host's to commit.
    pub fn revoked_pending(&self) -> std::collections::BTreeSet<i32> {
        lock(&self.shared).revoked.iter().map(|(_, p)| *p).collect()
    }

    /// What the rebalance callbacks recorded since the last call.
    pub fn rebalanced(&self) -> Rebalanced {
        let mut s = lock(&self.shared);
        let side = |(topic, p): (String, i32)| (super::side_of(&self.topics, &topic), p);
        Rebalanced {
            revoked: std::mem::take(&mut s.revoked)
                .into_iter()
                .map(side)
                .collect(),
            assigned: std::mem::take(&mut s.assigned)
                .into_iter()
                .map(side)
                .collect(),
            assignment: std::mem::take(&mut s.assignment),
        }
    }
}
