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

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers as _, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::client;
use super::partitioner::Partitioner;
use super::protocol::Protocol;
use super::sink::{
    error_headers, omission_headers, refuses_whole_request, send_with_room, verdict, Stripped,
    Verdict,
};
use super::transaction::{self, no_keep_alive, Outcome, Transactions};
use crate::config::{Config, Guarantee, RecordPolicy};
use crate::metrics::Metrics;
use crate::repartition::key::{self, NoKey};
use crate::repartition::{Plan, SidePlan};

mod refusals;
mod unsought;
use refusals::{Next, Pos, Refusals};
use unsought::Unsought;

/// How often records the join has committed past are deleted from the internal topics.
pub const TRUNCATE_EVERY: Duration = Duration::from_secs(10);
/// Records held at most for the merge; past it the earliest goes regardless of idle waits.
const QUEUED_MAX: usize = 200_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// The source topics' partition counts, read before anything else connects.
pub fn partition_counts(config: &Config) -> Result<[usize; 2]> {
    let reader: BaseConsumer = metadata_reader(config)?;
    let mut counts = [0; 2];
    for (i, topic) in [&config.join.left, &config.join.right]
        .into_iter()
        .enumerate()
    {
        counts[i] = client::topic_partitions(&reader, topic)?;
    }
    Ok(counts)
}

/// The running step, until dropped.
pub struct Repartitioner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Repartitioner {
    /// Creates the internal topics (or checks the partition counts of those that exist), waits
    /// until their metadata shows them, and starts the step.
    pub fn start(
        config: &Config,
        plan: &Plan,
        protocol: Protocol,
        metrics: Arc<Metrics>,
    ) -> Result<Repartitioner> {
        create_internal_topics(config, plan)?;
        let mut consumer_config = client::consumer(&config.kafka, protocol, 64 << 20);
        consumer_config.set("group.id", format!("{}-repartition", config.kafka.group_id));
        let consumer: BaseConsumer<Revocations> = consumer_config
            .create_with_context(Revocations::default())
            .context("creating the repartition consumer")?;
        let sources: Vec<&str> = plan.sides.iter().map(|s| s.source.as_str()).collect();
        consumer
            .subscribe(&sources)
            .context("subscribing the repartition consumer")?;
        let failures = Arc::new(Failures::default());
        let producer_config = producer_config(config);
        let (producer, transactions) = create_producer(&producer_config, &failures)?;
        let step = Step {
            consumer,
            producer,
            transactions,
            producer_config,
            failures,
            sides: plan.sides.clone(),
            partitions: plan.partitions,
            null_keys: config.join.null_keys,
            dead_letter_topic: config.output.dead_letter_topic.clone(),
            join_reader: client::reader(&config.kafka, &config.kafka.group_id)
                .create()
                .context("creating the reader of the join's committed offsets")?,
            admin: client::base(&config.kafka)
                .create()
                .context("creating an admin client")?,
            max_idle: config.join.max_idle,
            queues: Default::default(),
            queued: 0,
            forcing: false,
            metrics,
            refusals: RefCell::default(),
            unsought: Unsought::default(),
            sent: RefCell::default(),
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
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("cojoin-repartition".into())
            .spawn(move || step.run(&flag))
            .context("starting the repartition thread")?;
        Ok(Repartitioner {
            stop,
            thread: Some(thread),
        })
    }
}

impl Repartitioner {
    /// Why the step's thread ended, when it ended without being told to (a panic): the join
    /// would wait for ever on internal topics that no longer fill, so the host must stop. The
    /// run loop asks once per round.
    pub fn stopped(&mut self) -> Option<String> {
        let running = self.thread.as_ref()?;
        if !running.is_finished() || self.stop.load(Ordering::SeqCst) {
            return None;
        }
        let thread = self.thread.take()?;
        Some(match thread.join() {
            Ok(()) => "its thread returned".to_owned(),
            Err(panic) => format!("its thread panicked: {}", panic_message(&*panic)),
        })
    }
}

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".to_owned(),
    }
}

/// Dropping the step finishes the batch in hand (written and committed) and leaves its group.
impl Drop for Repartitioner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            if let Err(panic) = t.join() {
                tracing::error!(
                    "the repartition step's thread panicked: {}",
                    panic_message(&*panic)
                );
            }
        }
    }
}

/// The step's producer settings: the host's (`output.compression`, `kafka.options`), and under
/// exactly-once a transactional id of its own. Its defaults give way to the user's options, as
/// everywhere: a short linger (the step writes in bursts: a batch, then its flush), and the
/// sink's 10 s transaction timeout (a step killed with a transaction open holds the join's
/// read_committed fetches back until the broker aborts it).
fn producer_config(config: &Config) -> ClientConfig {
    let mut c = client::producer(&config.kafka, config.output.compression);
    // `queue.buffering.max.ms` is librdkafka's alias of `linger.ms`.
    if c.get("linger.ms").is_none() && c.get("queue.buffering.max.ms").is_none() {
        c.set("linger.ms", "5");
    }
    if config.output.guarantee == Guarantee::ExactlyOnce {
        let group = format!("{}-repartition", config.kafka.group_id);
        c.set(
            "transactional.id",
            transaction::transactional_id(&group, config.kafka.instance_id.as_deref()),
        );
        if c.get("transaction.timeout.ms").is_none() {
            c.set("transaction.timeout.ms", "10000");
        }
    }
    c
}

/// Creates each internal topic with the plan's partition count (the brokers' default
/// replication); one that exists must have that count.
fn create_internal_topics(config: &Config, plan: &Plan) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = client::base(&config.kafka)
        .create()
        .context("creating an admin client")?;
    let reader: BaseConsumer = metadata_reader(config)?;
    let runtime = runtime()?;
    for side in &plan.sides {
        let existing = client::topic_partitions(&reader, &side.internal)?;
        if existing == 0 {
            let topic = NewTopic::new(
                &side.internal,
                plan.partitions as i32,
                TopicReplication::Fixed(-1),
            );
            let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
            let results = runtime
                .block_on(admin.create_topics([&topic], &opts))
                .with_context(|| format!("creating {}", side.internal))?;
            for r in results {
                match r {
                    Ok(_) => {}
                    Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((t, e)) => anyhow::bail!(
                        "cannot create the internal topic {t}: {e}; create it with {} partitions, or give the host's principal the right to create topics",
                        plan.partitions
                    ),
                }
            }
        } else if existing != plan.partitions {
            anyhow::bail!(
                "the internal topic {} has {existing} partitions, the join needs {}: delete it (cojoin recreates it) or set join.partitions = {existing}",
                side.internal,
                plan.partitions
            );
        }
        let deadline = Instant::now() + TIMEOUT;
        while client::topic_partitions(&reader, &side.internal)? != plan.partitions {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the internal topic {} was created but its metadata did not show it within {TIMEOUT:?}",
                side.internal
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// A client for metadata only, in a group of its own: never a member of the join's group.
fn metadata_reader(config: &Config) -> Result<BaseConsumer> {
    // No group.id: a consumer with one looks its coordinator up at once, and a principal without
    // an ACL on that group gets an authorisation error logged for nothing.
    client::reader(&config.kafka, "")
        .remove("group.id")
        .create()
        .context("creating a metadata reader")
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("starting a runtime for admin requests")
}

type Writer = (Arc<BaseProducer<Counting>>, Option<Transactions<Counting>>);

/// The step's producer, and its transactions when it has a transactional id.
fn create_producer(config: &ClientConfig, failures: &Arc<Failures>) -> Result<Writer> {
    let producer: Arc<BaseProducer<Counting>> = Arc::new(
        config
            .create_with_context(Counting(failures.clone()))
            .context("creating the repartition producer")?,
    );
    let transactions = match config.get("transactional.id") {
        Some(_) => Some(Transactions::init(producer.clone())?),
        None => None,
    };
    Ok((producer, transactions))
}

/// Partitions revoked since the step last looked. Their held records are dropped then, even when
/// the group gives them straight back (an eager rebalance revokes all and assigns all): the
/// consumer fetches a partition it is given again from its committed offset, so held records
/// kept beside the fetched ones would be written twice.
#[derive(Default)]
struct Revocations(Mutex<Vec<(String, i32)>>);

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

/// Failed deliveries since the last batch began, and the last error; which sends failed (their
/// index in the step's `sent`) with the error.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    last: Mutex<Option<String>>,
    failed: Mutex<Vec<(usize, KafkaError)>>,
}

struct Counting(Arc<Failures>);

impl ClientContext for Counting {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        super::quiet::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        super::quiet::error(error, reason);
    }
}

impl ProducerContext for Counting {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        if let Err((e, _)) = result {
            self.0.count.fetch_add(1, Ordering::Relaxed);
            *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            self.0
                .failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((index, e.clone()));
        }
    }
}

/// A record the step sent in this batch: where it came from, and how it went.
struct Sent {
    pos: Pos,
    dead_letter: bool,
    alone: bool,
}

/// A source partition's records fetched and not yet written.
struct Queue {
    records: std::collections::VecDeque<OwnedMessage>,
    last_fetch: Instant,
    /// The offset after the last record fetched; at assignment, the group's committed offset.
    next: Option<i64>,
    /// Records on the broker not fetched yet (from the cached high watermark): waited for
    /// however long fetching takes, up to [`BEHIND_WAIT`], as a join task waits (KIP-695).
    behind: bool,
}

impl Queue {
    fn new(next: Option<i64>) -> Queue {
        Queue {
            records: Default::default(),
            last_fetch: Instant::now(),
            next,
            behind: true,
        }
    }
}

/// How long an empty partition with records still on the broker holds the merge back.
const BEHIND_WAIT: Duration = Duration::from_secs(30);

struct Step {
    consumer: BaseConsumer<Revocations>,
    producer: Arc<BaseProducer<Counting>>,
    /// Exactly-once: a batch's writes and input offsets are one transaction.
    transactions: Option<Transactions<Counting>>,
    /// To make the producer again when its transactions failed for good.
    producer_config: ClientConfig,
    failures: Arc<Failures>,
    sides: Vec<SidePlan>,
    partitions: usize,
    null_keys: RecordPolicy,
    dead_letter_topic: Option<String>,
    join_reader: BaseConsumer,
    admin: AdminClient<DefaultClientContext>,
    max_idle: Duration,
    queues: std::collections::BTreeMap<(String, i32), Queue>,
    queued: usize,
    /// This round started over [`QUEUED_MAX`]: the merge gives up waiting down to half of it.
    forcing: bool,
    metrics: Arc<Metrics>,
    /// Records the broker refused, and what to do with them when they come again.
    refusals: RefCell<Refusals>,
    /// What this batch sent, by the index its delivery report carries.
    sent: RefCell<Vec<Sent>>,
    /// Partitions a rewind could not seek back (see unsought.rs).
    unsought: Unsought,
}

/// What became of a record the step read.
#[derive(Clone, Copy)]
enum Fate {
    Written,
    DeadLettered,
    Dropped,
}

impl Step {
    fn run(mut self, stop: &AtomicBool) {
        let mut truncated = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if let Err(e) = self.batch() {
                tracing::warn!("repartitioning: {e:#}; the batch is read again");
                self.metrics.update(|m| {
                    if m.repartition_failing_since_ms == 0 {
                        m.repartition_failing_since_ms = crate::admin::now_ms();
                    }
                });
                std::thread::sleep(Duration::from_secs(1));
            } else {
                self.metrics.update(|m| m.repartition_failing_since_ms = 0);
            }
            if truncated.elapsed() >= TRUNCATE_EVERY {
                truncated = Instant::now();
                if let Err(e) = self.truncate() {
                    tracing::warn!("truncating the internal topics: {e:#}");
                }
            }
        }
        self.consumer.unsubscribe();
    }

    /// Reads what is there (up to [`QUEUED_MAX`] held), writes what the merge allows, waits for
    /// every acknowledgement, commits what was written (in the batch's transaction under
    /// exactly-once). A batch that fails is read again from its first offsets.
    fn batch(&mut self) -> Result<()> {
        let started = Instant::now();
        self.failures.count.store(0, Ordering::Relaxed);
        self.failures
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.sent.borrow_mut().clear();
        self.seek_unsought();
        while self.queued < QUEUED_MAX && started.elapsed() < Duration::from_millis(100) {
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
                    let queue = self
                        .queues
                        .entry((m.topic().to_owned(), m.partition()))
                        .or_insert_with(|| Queue::new(None));
                    queue.last_fetch = Instant::now();
                    queue.next = Some(m.offset() + 1);
                    queue.records.push_back(m);
                    self.queued += 1;
                }
                Err(e) => tracing::warn!("repartition consumer: {e}"),
            }
        }
        self.follow_assignment();
        // First offset written (to rewind to) and next offset (to commit) per source partition.
        let mut written: HashMap<(String, i32), (i64, i64)> = HashMap::new();
        let mut fates = [0u64; 3];
        self.forcing = self.queued >= QUEUED_MAX;
        let result = self
            .write_in_order(&mut written, &mut fates)
            .and_then(|()| self.commit(&written));
        self.metrics
            .update(|m| m.repartition_held = self.queued as u64);
        if let Err(e) = result {
            self.rewind(&written);
            if let Some(t) = &self.transactions {
                if let Outcome::Fatal(why) = t.abort(&format!("{e:#}"), &mut no_keep_alive) {
                    self.renew_producer(&why);
                }
            }
            return Err(e);
        }
        self.metrics.update(|m| {
            m.repartitioned += fates[Fate::Written as usize];
            m.repartition_dead_letters += fates[Fate::DeadLettered as usize];
            m.repartition_dropped += fates[Fate::Dropped as usize];
        });
        Ok(())
    }

    /// Writes the held records the merge lets go, in timestamp order.
    fn write_in_order(
        &mut self,
        written: &mut HashMap<(String, i32), (i64, i64)>,
        fates: &mut [u64; 3],
    ) -> Result<()> {
        while let Some(at) = self.next_in_order() {
            if let Some(t) = &self.transactions {
                if let Err(e) = t.ensure_open() {
                    self.renew_producer(&format!("beginning a transaction: {e}"));
                    return Err(anyhow::anyhow!("beginning a transaction: {e}"));
                }
            }
            let queue = self.queues.get_mut(&at).expect("chosen from the queues");
            let message = queue.records.pop_front().expect("chosen for its head");
            self.queued -= 1;
            let entry = written
                .entry(at)
                .or_insert((message.offset(), message.offset()));
            entry.1 = message.offset() + 1;
            let Some(side) = self.sides.iter().position(|s| s.source == message.topic()) else {
                continue;
            };
            let fate = self.forward(side, &message).with_context(|| {
                format!(
                    "writing {}-{}@{}",
                    message.topic(),
                    message.partition(),
                    message.offset()
                )
            })?;
            fates[fate as usize] += 1;
        }
        Ok(())
    }

    /// Waits for every write of the batch, then commits its input offsets: in the batch's
    /// transaction under exactly-once, else to the step's group.
    fn commit(&mut self, written: &HashMap<(String, i32), (i64, i64)>) -> Result<()> {
        if written.is_empty() {
            return Ok(());
        }
        // Not `flush`, which waits out 100 ms steps (kafka/acks.rs).
        let flushed = super::acks::wait_delivered(&self.producer, Instant::now() + TIMEOUT);
        let failed = self.failures.count.load(Ordering::Relaxed);
        if failed > 0 {
            self.note_refusals();
        }
        if !flushed || failed > 0 {
            let last = self
                .failures
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            anyhow::bail!(
                "{failed} writes failed ({}), all acknowledged: {flushed}",
                last.unwrap_or_default()
            );
        }
        let mut offsets = TopicPartitionList::new();
        for ((topic, partition), (_, next)) in written {
            offsets.add_partition_offset(topic, *partition, Offset::Offset(*next))?;
        }
        let Some(t) = &self.transactions else {
            if let Err(e) = self.consumer.commit(&offsets, CommitMode::Sync) {
                // A partition moved to another host meanwhile: it reads these records again
                // (the internal topic gets them twice), nothing is lost.
                tracing::info!("repartition commit: {e} (records may be written twice)");
            }
            self.forget_dead_lettered();
            return Ok(());
        };
        let group = self
            .consumer
            .group_metadata()
            .context("the repartition consumer has no group metadata yet")?;
        match t.commit(&offsets, &group, &mut no_keep_alive) {
            Outcome::Committed { .. } | Outcome::Nothing => {
                self.forget_dead_lettered();
                Ok(())
            }
            // Aborted: nothing of the batch is visible; it is read again.
            Outcome::Aborted(why) => anyhow::bail!("transaction aborted: {why}"),
            Outcome::Fatal(why) => {
                self.renew_producer(&why);
                anyhow::bail!("transaction failed: {why}")
            }
        }
    }

    /// Read again from each partition's first record written: what is held behind it is read
    /// again too. A partition that cannot be sought back waits, paused, until it can
    /// ([`Unsought`]): going on from the fetch position would commit past records never written.
    fn rewind(&mut self, written: &HashMap<(String, i32), (i64, i64)>) {
        for ((topic, partition), (first, _)) in written {
            if let Some(q) = self.queues.get_mut(&(topic.clone(), *partition)) {
                self.queued -= q.records.len();
                q.records.clear();
            }
            let at = Offset::Offset(*first);
            if let Err(e) = self.consumer.seek(topic, *partition, at, TIMEOUT) {
                tracing::warn!(
                    "repartitioning: cannot go back to offset {first} of {topic} [{partition}]: {e}; the partition waits, paused, until it can"
                );
                self.unsought.failed(topic, *partition, *first);
                self.pause_or_resume(topic, *partition, true);
            }
        }
    }

    /// Seeks again the partitions a rewind could not seek back, and resumes those it can now.
    fn seek_unsought(&mut self) {
        let consumer = &self.consumer;
        let sought = self.unsought.retry(|topic, p, offset| {
            consumer
                .seek(topic, p, Offset::Offset(offset), TIMEOUT)
                .is_ok()
        });
        for (topic, p) in sought {
            tracing::info!("repartitioning: {topic} [{p}] went back to where it failed; resumed");
            self.pause_or_resume(&topic, p, false);
        }
    }

    fn pause_or_resume(&self, topic: &str, partition: i32, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let done = if pause {
            self.consumer.pause(&tpl)
        } else {
            self.consumer.resume(&tpl)
        };
        // Paused or not, its records are dropped while it waits (Unsought::holds).
        if let Err(e) = done {
            tracing::warn!("repartitioning: pausing or resuming {topic} [{partition}]: {e}");
        }
    }

    /// A transactional producer that failed for good (fenced after the broker timed its
    /// transaction out, say) may not write again: a new one takes its transactional id.
    fn renew_producer(&mut self, why: &str) {
        tracing::warn!("repartition producer: {why}; making a new one");
        match create_producer(&self.producer_config, &self.failures) {
            Ok((producer, transactions)) => {
                self.producer = producer;
                self.transactions = transactions;
            }
            Err(e) => tracing::warn!(
                "making a new repartition producer: {e:#}; tried again with the next batch"
            ),
        }
    }

    /// Drops the queues of the partitions revoked since the last look (see [`Revocations`]).
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
        for at in revoked {
            if let Some(q) = self.queues.remove(&at) {
                self.queued -= q.records.len();
            }
        }
    }

    /// Queues for the partitions the group gives this step now: a revoked partition's held
    /// records are dropped (not committed, so its new owner reads them), a new one waits
    /// `max_idle` for its first records before the merge goes on without it.
    fn follow_assignment(&mut self) {
        let Ok(assigned) = self.consumer.assignment() else {
            return;
        };
        let now: std::collections::HashSet<(String, i32)> = assigned
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        let queued = &mut self.queued;
        self.queues.retain(|at, q| {
            let keep = now.contains(at);
            if !keep {
                *queued -= q.records.len();
            }
            keep
        });
        let new: Vec<(String, i32)> = now
            .into_iter()
            .filter(|at| !self.queues.contains_key(at))
            .collect();
        if !new.is_empty() {
            // Where each new partition starts: its committed offset (none: from the beginning).
            let mut tpl = TopicPartitionList::new();
            for (topic, p) in &new {
                tpl.add_partition(topic, *p);
            }
            let committed = self.consumer.committed_offsets(tpl, TIMEOUT).ok();
            for at in new {
                let next = committed
                    .as_ref()
                    .and_then(|c| c.find_partition(&at.0, at.1))
                    .and_then(|e| match e.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    });
                self.queues.insert(at, Queue::new(next));
            }
        }
        for ((topic, p), q) in self.queues.iter_mut() {
            q.behind = match (q.next, client::cached_watermarks(&self.consumer, topic, *p)) {
                (Some(next), Some((_, high))) => next < high,
                // Nothing fetched or committed: behind unless the partition holds nothing.
                (None, Some((low, high))) => high > low.max(0),
                (_, None) => true,
            };
        }
    }

    /// The partition whose held record comes next in timestamp order, once every partition
    /// holds a record, or has been idle for `max_idle` with nothing left on the broker, or for
    /// [`BEHIND_WAIT`] (as a join task waits for both its partitions); past [`QUEUED_MAX`] held,
    /// the earliest goes regardless.
    fn next_in_order(&self) -> Option<(String, i32)> {
        // Over the cap: the earliest goes regardless, down to half the cap (one at a time would
        // flush and commit for every record).
        if self.queued >= QUEUED_MAX / 2 && self.forcing {
            return self.earliest();
        }
        let waiting = self.queues.values().any(|q| {
            let wait = if q.behind { BEHIND_WAIT } else { self.max_idle };
            q.records.is_empty() && q.last_fetch.elapsed() < wait
        });
        if waiting && self.queued < QUEUED_MAX {
            return None;
        }
        self.earliest()
    }

    fn earliest(&self) -> Option<(String, i32)> {
        self.queues
            .iter()
            .filter_map(|(at, q)| {
                let ts = q.records.front()?.timestamp().to_millis().unwrap_or(0);
                Some((ts, at))
            })
            .min()
            .map(|(_, at)| at.clone())
    }

    /// One record to its internal topic, or to the dead-letter topic when it has no join key or
    /// the broker refused it for good before.
    fn forward(&self, side_ix: usize, m: &OwnedMessage) -> Result<Fate> {
        let side = &self.sides[side_ix];
        let headers = m.headers().cloned();
        let pos: Pos = (side_ix, m.partition(), m.offset());
        let next = self
            .refusals
            .borrow()
            .next(&pos)
            .map(|(n, why)| (n, why.to_owned()));
        let new_key = match key::select(&side.key, m.key(), m.payload()) {
            Ok(new_key) => new_key,
            Err(no_key) => return self.no_key(side_ix, m, headers, &no_key),
        };
        if let Some((Next::DeadLetter(stripped), why)) = &next {
            return self.dead_letter_refused(side, m, pos, why, *stripped);
        }
        let alone = next.is_some();
        if alone {
            // Every record before it delivered: it goes in a request of its own.
            super::acks::wait_delivered(&self.producer, Instant::now() + TIMEOUT);
        }
        let partition = Partitioner::Murmur2.partition(&new_key, self.partitions);
        let index = self.track(pos, false, alone);
        let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&side.internal, index)
            .key(&new_key[..])
            .partition(partition);
        record.payload = m.payload();
        if let Some(ts) = m.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(h) = headers {
            record = record.headers(h);
        }
        match send_with_room(&self.producer, record) {
            Ok(()) => {}
            // Refused before it was sent (over message.max.bytes): its own fault, for good.
            Err(e) if refuses_whole_request(&e) => {
                let why = e.to_string();
                self.refusals
                    .borrow_mut()
                    .write_refused(pos, why.clone(), true);
                return self.dead_letter_refused(side, m, pos, &why, Stripped::Nothing);
            }
            Err(e) => return Err(kafka_error(e)),
        }
        if alone {
            super::acks::wait_delivered(&self.producer, Instant::now() + TIMEOUT);
            if !self.failed_index(index) {
                self.refusals.borrow_mut().written(&pos);
            }
        }
        Ok(Fate::Written)
    }

    /// Numbers a send for its delivery report.
    fn track(&self, pos: Pos, dead_letter: bool, alone: bool) -> usize {
        let mut sent = self.sent.borrow_mut();
        sent.push(Sent {
            pos,
            dead_letter,
            alone,
        });
        sent.len() - 1
    }

    fn failed_index(&self, index: usize) -> bool {
        self.failures
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(i, _)| *i == index)
    }

    /// A record its internal topic refused for good, to the dead-letter topic as `output-refused`,
    /// leaving out what the dead-letter topic refused before.
    fn dead_letter_refused(
        &self,
        side: &SidePlan,
        m: &OwnedMessage,
        pos: Pos,
        why: &str,
        mut stripped: Stripped,
    ) -> Result<Fate> {
        let Some(dlq) = &self.dead_letter_topic else {
            anyhow::bail!(
                "{}-{}@{} cannot be written to {}: {why}; set output.dead_letter_topic so that such a record is dead-lettered (the side waits behind it until then)",
                m.topic(), m.partition(), m.offset(), side.internal
            );
        };
        let reason = format!(
            "writing it re-keyed to the internal topic {} was refused: {why}",
            side.internal
        );
        loop {
            tracing::warn!(record = %format!("{}-{}@{}", m.topic(), m.partition(), m.offset()), dead_letter_topic = %dlq, ?stripped, "dead-lettered: {reason}");
            let own = match (stripped, m.headers()) {
                (Stripped::KeyValueAndHeaders, _) | (_, None) => OwnedHeaders::new(),
                (_, Some(h)) => h.clone(),
            };
            let headers = omission_headers(
                error_headers(
                    own,
                    "output-refused",
                    &reason,
                    None,
                    (
                        m.topic(),
                        m.partition(),
                        m.offset(),
                        m.timestamp().to_millis().unwrap_or(0),
                    ),
                ),
                stripped,
                m.key(),
                m.payload().map_or(0, <[u8]>::len),
                m.headers().map_or(0, |h| h.count()),
            );
            let index = self.track(pos, true, false);
            let mut record =
                BaseRecord::<[u8], [u8], usize>::with_opaque_to(dlq, index).headers(headers);
            if stripped != Stripped::KeyValueAndHeaders {
                record.key = m.key();
            }
            if stripped == Stripped::Nothing {
                record.payload = m.payload();
            }
            match send_with_room(&self.producer, record) {
                Ok(()) => return Ok(Fate::DeadLettered),
                Err(e) => {
                    let more = if verdict(&e) == Verdict::Refused {
                        self.refusals.borrow_mut().dead_letter_refused(&pos)
                    } else {
                        None
                    };
                    stripped = more.ok_or_else(|| kafka_error(e))?;
                }
            }
        }
    }

    /// What the failed deliveries of a batch say about its records: one refused for good is
    /// written alone, or dead-lettered, when the batch is read again; a dead letter refused
    /// leaves out more the next time.
    fn note_refusals(&self) {
        let failed = std::mem::take(
            &mut *self
                .failures
                .failed
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let sent = self.sent.borrow();
        let mut refusals = self.refusals.borrow_mut();
        for (index, e) in failed {
            let Some(s) = sent.get(index) else { continue };
            if s.dead_letter {
                if verdict(&e) == Verdict::Refused {
                    refusals.dead_letter_refused(&s.pos);
                }
            } else if refuses_whole_request(&e) {
                refusals.write_refused(s.pos, e.to_string(), s.alone);
            }
        }
    }

    /// The batch's dead letters are committed: their records are done with.
    fn forget_dead_lettered(&self) {
        let sent = self.sent.borrow();
        let mut refusals = self.refusals.borrow_mut();
        for s in sent.iter().filter(|s| s.dead_letter) {
            refusals.forget(&s.pos);
        }
    }

    fn no_key(
        &self,
        side_ix: usize,
        m: &OwnedMessage,
        headers: Option<OwnedHeaders>,
        no_key: &NoKey,
    ) -> Result<Fate> {
        let side = &self.sides[side_ix];
        let reason = format!("no join key ({}): {}", side.key, no_key.reason());
        let at = format!("{}-{}@{}", m.topic(), m.partition(), m.offset());
        match (self.null_keys, &self.dead_letter_topic) {
            (RecordPolicy::DeadLetter, Some(dlq)) => {
                tracing::info!(record = %at, dead_letter_topic = %dlq, "dead-lettered: {reason}");
                let h = error_headers(
                    headers.unwrap_or_default(),
                    "null-key",
                    &reason,
                    None,
                    (
                        m.topic(),
                        m.partition(),
                        m.offset(),
                        m.timestamp().to_millis().unwrap_or(0),
                    ),
                );
                let index = self.track((side_ix, m.partition(), m.offset()), true, false);
                let mut record =
                    BaseRecord::<[u8], [u8], usize>::with_opaque_to(dlq, index).headers(h);
                record.key = m.key();
                record.payload = m.payload();
                send_with_room(&self.producer, record).map_err(kafka_error)?;
                Ok(Fate::DeadLettered)
            }
            _ => {
                tracing::info!(record = %at, "dropped (join.null_keys = \"drop\"): {reason}");
                Ok(Fate::Dropped)
            }
        }
    }

    /// Deletes the internal topics' records below the join group's committed offsets.
    fn truncate(&self) -> Result<()> {
        let mut wanted = TopicPartitionList::new();
        for side in &self.sides {
            for p in 0..self.partitions as i32 {
                wanted.add_partition(&side.internal, p);
            }
        }
        let committed = self.join_reader.committed_offsets(wanted, TIMEOUT)?;
        let mut below = TopicPartitionList::new();
        for e in committed.elements() {
            if let Offset::Offset(o) = e.offset() {
                if o > 0 {
                    below.add_partition_offset(e.topic(), e.partition(), Offset::Offset(o))?;
                }
            }
        }
        if below.count() == 0 {
            return Ok(());
        }
        let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
        runtime()?
            .block_on(self.admin.delete_records(&below, &opts))
            .context("DeleteRecords")?;
        Ok(())
    }
}

fn kafka_error(e: KafkaError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

#[cfg(test)]
mod tests;
