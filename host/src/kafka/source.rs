//! The consuming side of a host: one consumer in the join's group, subscribed to both topics with
//! the range assignor (partition p of each on the same member). It hands the run loop records as
//! events, rebalances as revoked and assigned partitions (with the commit points they start
//! from), end offsets and lag, and commits the points the tasks publish.
//!
//! Rebalance callbacks run inside `poll`, between processing rounds; on revoke they commit the
//! last published points of the revoked partitions before those go, so the next owner starts
//! where this one stopped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::event::{Event, Side};
use crate::join::CommitPoint;
use crate::kafka::sink::SinkTransactions;
use crate::kafka::transaction::{no_keep_alive, KeepAlive, Outcome};
use crate::metrics::Metrics;
use crate::report::Happened;

const TIMEOUT: Duration = Duration::from_secs(10);

/// What the rebalance callbacks and the loop share. Locked only briefly, never across I/O other
/// than the revoke commit (which must happen before the partitions go).
#[derive(Default)]
struct Shared {
    /// The latest commit point of every held partition, as the tasks published them.
    points: HashMap<(String, i32), CommitPoint>,
    /// Partitions that came and went since the loop last asked, in callback order.
    assigned: Vec<(String, i32)>,
    revoked: Vec<(String, i32)>,
    /// An assignment callback ran (under the classic protocol it can be empty).
    assignment: bool,
    /// Exactly-once: the revoke callback's transaction was aborted or failed for good.
    transaction_failed: Option<Outcome>,
    /// Exactly-once: the points of the last committed transaction (an idle host commits none).
    committed: HashMap<(String, i32), CommitPoint>,
    /// Exactly-once: partitions were revoked while the loop waited on the broker (a poll to keep
    /// its membership), without a commit: the open transaction holds outputs of their tasks and
    /// must be aborted before anything else is committed (why).
    doomed: Option<String>,
}

/// Counts and logs a transaction's outcome.
fn report_transaction(metrics: &Metrics, outcome: &Outcome, on_revoke: bool) {
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
fn report_commit(
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

struct RebalanceContext {
    shared: Arc<Mutex<Shared>>,
    metrics: Arc<Metrics>,
    topics: [Arc<str>; 2],
    transactions: Option<Arc<SinkTransactions>>,
}

impl ClientContext for RebalanceContext {
    // An instance id still held (see [`InstanceIdHeld`]) is expected while the run loop waits
    // for the broker to release it: said once by the loop, not at error level per attempt.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if message.contains(INSTANCE_ID_HELD) {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
        } else {
            super::quiet::log(level, fac, message);
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if reason.contains(INSTANCE_ID_HELD) {
            tracing::debug!(target: "librdkafka", "librdkafka: {error}: {reason}");
        } else {
            super::quiet::error(error, reason);
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

fn lock_paused(
    paused: &Mutex<HashSet<(Side, i32)>>,
) -> std::sync::MutexGuard<'_, HashSet<(Side, i32)>> {
    paused.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// A consumed record, as a task takes it.
pub struct Record {
    pub side: Side,
    pub event: Event,
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

/// The consumer protocol refused this host's `kafka.instance_id`: the broker still holds it for
/// a member that did not leave (a host killed with -9), until its session timeout. Fatal for the
/// consumer; the run loop makes a new one and tries again until the broker releases the id.
#[derive(Debug, thiserror::Error)]
#[error("the broker still holds this kafka.instance_id for an earlier member that did not leave ({0}); it is released at that member's session timeout (group.consumer.session.timeout.ms); if another running host has the same instance_id, give each host its own")]
pub struct InstanceIdHeld(String);

pub struct Source {
    consumer: BaseConsumer<RebalanceContext>,
    shared: Arc<Mutex<Shared>>,
    metrics: Arc<Metrics>,
    /// Exactly-once: commits go through the transaction, not the consumer.
    transactions: Option<Arc<SinkTransactions>>,
    /// Every event of a topic shares its name: no allocation of a topic string per record.
    topics: [Arc<str>; 2],
    /// Partitions this host paused (halted task, lone half, backpressure). librdkafka keeps a
    /// partition's pause across a revoke and a later assignment, and resuming a partition that is
    /// not paused restarts its fetch from a stale position: so pauses are tracked here, a task
    /// starting on a partition paused earlier seeks and resumes it, and only paused ones resume.
    paused: Mutex<HashSet<(Side, i32)>>,
    /// The consumer group, and who the broker sees this host as: named when the broker refuses.
    group: String,
    principal: String,
}

impl Source {
    /// A consumer for `left` and `right`, not yet subscribed; what happens to it is reported to
    /// `metrics`.
    pub fn new(
        config: &ClientConfig,
        left: &str,
        right: &str,
        metrics: Arc<Metrics>,
        transactions: Option<Arc<SinkTransactions>>,
    ) -> Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let topics: [Arc<str>; 2] = [left.into(), right.into()];
        let consumer = config
            .create_with_context(RebalanceContext {
                shared: shared.clone(),
                metrics: metrics.clone(),
                topics: topics.clone(),
                transactions: transactions.clone(),
            })
            .context("creating the Kafka consumer (check [kafka] and [kafka.options])")?;
        Ok(Source {
            consumer,
            shared,
            metrics,
            topics,
            transactions,
            paused: Mutex::default(),
            group: config.get("group.id").unwrap_or_default().to_owned(),
            principal: "<this host's principal>".to_owned(),
        })
    }

    /// Who the broker sees this host as ([`crate::acl::principal`]), named when it refuses a read.
    pub fn set_principal(&mut self, principal: String) {
        self.principal = principal;
    }

    /// An authorisation error of the consumer (an ACL removed while running): retrying would
    /// only repeat it, and the group would move the tasks away meanwhile. The host stops, naming
    /// the permission; what it processed and did not commit is replayed once it is granted.
    fn unauthorized(&self, e: &rdkafka::error::KafkaError) -> Option<anyhow::Error> {
        use crate::acl::{Operation, Permission, Resource};
        use rdkafka::types::RDKafkaErrorCode as C;
        let missing: Vec<String> = match e.rdkafka_error_code()? {
            C::TopicAuthorizationFailed => self
                .topics
                .iter()
                .map(|t| Resource::Topic(t.to_string()))
                .collect(),
            C::GroupAuthorizationFailed => vec![Resource::Group(self.group.clone())],
            _ => return None,
        }
        .into_iter()
        .map(|resource| {
            Permission {
                resource,
                operation: Operation::Read,
                unless_exists: false,
                why: "the join reads it",
            }
            .missing_message(&self.principal)
        })
        .collect();
        Some(anyhow::anyhow!(
            "the broker refused this host's consumer ({e}): {}; stopping without committing",
            missing.join(", or ")
        ))
    }

    /// Joins the group.
    pub fn subscribe(&self) -> Result<()> {
        let [left, right] = &self.topics;
        self.consumer
            .subscribe(&[left, right])
            .context("subscribing to the joined topics")
    }

    /// The next record, waiting at most `timeout`; `None` when there is none. Rebalance callbacks
    /// run in here: call [`Source::rebalanced`] after each poll. An error only when the consumer
    /// cannot go on (a fatal error: it will not consume again); others are reported and retried
    /// by librdkafka.
    pub fn poll(&self, timeout: Duration) -> Result<Option<Record>> {
        match self.consumer.poll(timeout) {
            None => Ok(None),
            Some(Ok(m)) => Ok(Some(self.record(&m))),
            Some(Err(rdkafka::error::KafkaError::MessageConsumptionFatal(_))) => {
                let (code, reason) = self
                    .consumer
                    .client()
                    .fatal_error()
                    .unwrap_or((rdkafka::types::RDKafkaErrorCode::Fatal, "unknown".into()));
                let hint = match code {
                    rdkafka::types::RDKafkaErrorCode::UnreleasedInstanceId => {
                        return Err(anyhow::Error::new(InstanceIdHeld(reason)));
                    }
                    rdkafka::types::RDKafkaErrorCode::UnsupportedVersion
                    | rdkafka::types::RDKafkaErrorCode::UnsupportedFeature
                    | rdkafka::types::RDKafkaErrorCode::UnsupportedAssignor => {
                        " (the broker does not run the consumer group protocol: set kafka.group_protocol = \"classic\")"
                    }
                    _ => "",
                };
                anyhow::bail!("the consumer failed for good: {code:?}: {reason}{hint}; stopping (a restart resumes from the last commit)")
            }
            Some(Err(e)) => {
                Happened::ConsumerError { error: &e }.emit(&self.metrics);
                match self.unauthorized(&e) {
                    Some(stop) => Err(stop),
                    None => Ok(None),
                }
            }
        }
    }

    fn record(&self, m: &BorrowedMessage<'_>) -> Record {
        let side = if m.topic() == &*self.topics[0] {
            Side::Left
        } else {
            Side::Right
        };
        Record {
            side,
            event: event_of(m, &self.topics[side as usize]),
        }
    }

    /// What the rebalance callbacks recorded since the last call.
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

    pub fn rebalanced(&self) -> Rebalanced {
        let mut s = lock(&self.shared);
        let side = |(topic, p): (String, i32)| {
            let side = if *topic == *self.topics[0] {
                Side::Left
            } else {
                Side::Right
            };
            (side, p)
        };
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

    /// The committed points of partition p of both topics, for each p in `tasks`: where a new
    /// task starts (offset 0 and nothing processed when nothing was committed).
    pub fn committed(&self, tasks: &[i32]) -> Result<HashMap<i32, [CommitPoint; 2]>> {
        let mut wanted = TopicPartitionList::new();
        for &p in tasks {
            for topic in &self.topics {
                wanted.add_partition(topic, p);
            }
        }
        let committed = self
            .consumer
            .committed_offsets(wanted, TIMEOUT)
            .context("reading committed offsets of the new tasks")?;
        let mut starts: HashMap<i32, [CommitPoint; 2]> = tasks
            .iter()
            .map(|&p| (p, [CommitPoint::new(0, [], None); 2]))
            .collect();
        for e in committed.elements() {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            let side = usize::from(e.topic() != &*self.topics[0]);
            if let Some(start) = starts.get_mut(&e.partition()) {
                start[side] = CommitPoint {
                    offset,
                    processed_through: CommitPoint::parse_metadata(e.metadata()),
                };
            }
        }
        Ok(starts)
    }

    /// End offsets of partition p of both topics as the broker reports them now (0 when it does
    /// not answer: the first fetch will tell).
    pub fn end_offsets(&self, p: i32) -> [i64; 2] {
        [0, 1].map(|i| {
            let topic = &self.topics[i];
            match self.consumer.fetch_watermarks(topic, p, TIMEOUT) {
                Ok((_, high)) => high,
                Err(e) => {
                    tracing::warn!(
                        topic = &**topic,
                        partition = p,
                        "end offset not known until the first fetch: {e}"
                    );
                    0
                }
            }
        })
    }

    /// End offsets of partition p of both topics as the consumer last saw them in a fetch
    /// response (no broker round trip).
    pub fn cached_end_offsets(&self, p: i32) -> [Option<i64>; 2] {
        [0, 1].map(|i| self.cached_high_watermark(&self.topics[i], p))
    }

    fn cached_high_watermark(&self, topic: &str, p: i32) -> Option<i64> {
        super::client::cached_watermarks(&self.consumer, topic, p).map(|(_, high)| high)
    }

    /// Records behind the high watermark per task and side, from the cached watermarks and the
    /// consumer's positions.
    pub fn lag(&self, tasks: impl Iterator<Item = i32>) -> HashMap<i32, [Option<i64>; 2]> {
        let Ok(positions) = self.consumer.position() else {
            return HashMap::new();
        };
        let lag = |topic: &str, p: i32| -> Option<i64> {
            let high = self.cached_high_watermark(topic, p)?;
            match positions.find_partition(topic, p)?.offset() {
                Offset::Offset(pos) => Some((high - pos).max(0)),
                _ => None,
            }
        };
        tasks
            .map(|p| (p, [lag(&self.topics[0], p), lag(&self.topics[1], p)]))
            .collect()
    }

    /// This consumer's member id in the group, once it has one.
    pub fn member_id(&self) -> Option<String> {
        // SAFETY: the client pointer lives as long as `self.consumer`; librdkafka returns a
        // NUL-terminated copy (or null) that is freed here with its own allocator.
        unsafe {
            let ptr = rdkafka::bindings::rd_kafka_memberid(self.consumer.client().native_ptr());
            if ptr.is_null() {
                return None;
            }
            let id = std::ffi::CStr::from_ptr(ptr).to_string_lossy().into_owned();
            rdkafka::bindings::rd_kafka_mem_free(std::ptr::null_mut(), ptr.cast());
            (!id.is_empty()).then_some(id)
        }
    }

    /// Stops fetching partition p of both topics (a halted task).
    pub fn pause(&self, p: i32) -> Result<()> {
        for side in [Side::Left, Side::Right] {
            self.pause_side(side, p, "a halted task")?;
        }
        Ok(())
    }

    /// Stops fetching one partition: a half whose pair this host does not hold.
    pub fn pause_half(&self, side: Side, p: i32) -> Result<()> {
        self.pause_side(side, p, "until its pair comes")
    }

    /// Stops fetching one partition; `why` goes into the error.
    pub fn pause_side(&self, side: Side, p: i32, why: &str) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side as usize], p);
        self.consumer
            .pause(&tpl)
            .with_context(|| format!("pausing {}-{p} ({why})", self.topics[side as usize]))?;
        lock_paused(&self.paused).insert((side, p));
        Ok(())
    }

    /// Fetches a partition paused by [`Source::pause_side`] again, from the next record not yet
    /// polled (librdkafka resumes there). One not paused is left alone.
    pub fn resume_side(&self, side: Side, p: i32) -> Result<()> {
        if !lock_paused(&self.paused).remove(&(side, p)) {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[side as usize], p);
        self.consumer
            .resume(&tpl)
            .with_context(|| format!("resuming {}-{p}", self.topics[side as usize]))
    }

    /// Moves one partition's fetch position to `offset` (records polled from it and not handed
    /// to its task are fetched again).
    pub fn seek_side(&self, side: Side, p: i32, offset: i64) -> Result<()> {
        let topic = &self.topics[side as usize];
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Offset(offset))
            .context("building a seek list")?;
        let sought = self
            .consumer
            .seek_partitions(tpl, TIMEOUT)
            .with_context(|| format!("moving {topic}-{p} back to offset {offset}"))?;
        for e in sought.elements() {
            e.error()
                .with_context(|| format!("moving {topic}-{p} back to offset {offset}"))?;
        }
        Ok(())
    }

    /// Whether either partition of task p is paused (since an earlier assignment, maybe).
    pub fn is_paused(&self, p: i32) -> bool {
        let paused = lock_paused(&self.paused);
        paused.contains(&(Side::Left, p)) || paused.contains(&(Side::Right, p))
    }

    /// Moves partition p of both topics back to where task p starts and fetches them: what was
    /// read of a half while it waited for its pair was dropped.
    pub fn rewind_and_resume(&self, p: i32, start: &[CommitPoint; 2]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, point) in self.topics.iter().zip(start) {
            tpl.add_partition_offset(topic, p, Offset::Offset(point.offset))
                .context("building a seek list")?;
        }
        let sought = self
            .consumer
            .seek_partitions(tpl.clone(), TIMEOUT)
            .with_context(|| format!("moving task {p} back to its committed offsets"))?;
        for e in sought.elements() {
            e.error().with_context(|| {
                format!("moving {}-{p} back to its committed offset", e.topic())
            })?;
        }
        self.consumer
            .resume(&tpl)
            .with_context(|| format!("resuming task {p}"))?;
        let mut paused = lock_paused(&self.paused);
        paused.remove(&(Side::Left, p));
        paused.remove(&(Side::Right, p));
        Ok(())
    }

    /// Records what task p would commit now for the left and the right partition; the next
    /// [`Source::commit`] (or a revoke) commits it.
    pub fn publish(&self, p: i32, points: [CommitPoint; 2]) {
        let mut s = lock(&self.shared);
        for (topic, point) in self.topics.iter().zip(points) {
            s.points.insert((topic.to_string(), p), point);
        }
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
            let result = self.consumer.commit(&commit_list(points), CommitMode::Sync);
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

    /// Exactly-once: a transaction a revoke callback failed to commit since the last call.
    pub fn transaction_failed(&self) -> Option<Outcome> {
        lock(&self.shared).transaction_failed.take()
    }

    /// Leaves the group (revoking, and so committing, what is held).
    pub fn close(self) {
        // Closing, not unsubscribing: a static member (kafka.instance_id) then keeps its
        // partitions for the session timeout (KIP-345 sends no LeaveGroup; KIP-848 leaves with
        // epoch -2), so a restart within it moves nothing; a dynamic member leaves at once.
        // rdkafka's drop closes the consumer and polls until it is closed, running the revoke
        // callback that commits (closing it here first made that drop log an error).
        drop(self.consumer);
    }
}

/// The event of a consumed record; `topic` is the record's topic name, shared.
pub fn event_of<M: Message>(m: &M, topic: &Arc<str>) -> Event {
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
        key: m.key().map(Box::from),
        value: m.payload().map(Box::from),
        headers,
    }
}
