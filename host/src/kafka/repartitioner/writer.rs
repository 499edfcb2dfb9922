//! The repartition step's producing side: each record re-keyed to its side's internal topic, or
//! dead-lettered (no join key, or refused for good by the broker: [`super::refusals`]); every
//! delivery awaited before a batch commits; under exactly-once, the batch's transaction, and a
//! new producer when its transactions failed for good.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers as _, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::{ClientContext, TopicPartitionList};

use super::refusals::{Next, Pos, Refusals};
use super::TIMEOUT;
use crate::config::{Config, Guarantee, RecordPolicy};
use crate::kafka::acks::wait_delivered;
use crate::kafka::client;
use crate::kafka::partitioner::Partitioner;
use crate::kafka::sink::{
    error_headers, omission_headers, refuses_whole_request, send_with_room, verdict, Stripped,
    Verdict,
};
use crate::kafka::transaction::{self, no_keep_alive, Outcome, Transactions};
use crate::repartition::key::{self, NoKey};
use crate::repartition::{Plan, SidePlan};

/// The step's producer settings: the host's (`output.compression`, `kafka.options`), and under
/// exactly-once a transactional id of its own. Its defaults give way to the user's options, as
/// everywhere: a short linger (the step writes in bursts: a batch, then its flush), and the
/// sink's 10 s transaction timeout (a step killed with a transaction open holds the join's
/// read_committed fetches back until the broker aborts it).
pub(super) fn producer_config(config: &Config) -> ClientConfig {
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

type Producer = (Arc<BaseProducer<Counting>>, Option<Transactions<Counting>>);

/// The step's producer, and its transactions when it has a transactional id.
fn create_producer(config: &ClientConfig, failures: &Arc<Failures>) -> Result<Producer> {
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

/// Failed deliveries since the last batch began, and the last error; which sends failed (their
/// index in the writer's `sent`) with the error.
#[derive(Default)]
struct Failures {
    count: AtomicU64,
    last: Mutex<Option<String>>,
    failed: Mutex<Vec<(usize, KafkaError)>>,
}

struct Counting(Arc<Failures>);

impl ClientContext for Counting {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        crate::kafka::quiet::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::kafka::quiet::error(error, reason);
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

/// What became of a record the step read.
#[derive(Clone, Copy)]
pub(super) enum Fate {
    Written,
    DeadLettered,
    Dropped,
}

pub(super) struct Writer {
    producer: Arc<BaseProducer<Counting>>,
    /// Exactly-once: a batch's writes and input offsets are one transaction.
    transactions: Option<Transactions<Counting>>,
    /// To make the producer again when its transactions failed for good.
    config: ClientConfig,
    failures: Arc<Failures>,
    sides: Vec<SidePlan>,
    partitions: usize,
    null_keys: RecordPolicy,
    dead_letter_topic: Option<String>,
    /// Records the broker refused, and what to do with them when they come again.
    refusals: Refusals,
    /// What this batch sent, by the index its delivery report carries.
    sent: Vec<Sent>,
}

impl Writer {
    pub(super) fn new(config: &Config, plan: &Plan) -> Result<Writer> {
        let failures = Arc::new(Failures::default());
        let producer_config = producer_config(config);
        let (producer, transactions) = create_producer(&producer_config, &failures)?;
        Ok(Writer {
            producer,
            transactions,
            config: producer_config,
            failures,
            sides: plan.sides.clone(),
            partitions: plan.partitions,
            null_keys: config.join.null_keys,
            dead_letter_topic: config.output.dead_letter_topic.clone(),
            refusals: Refusals::default(),
            sent: Vec::new(),
        })
    }

    /// The side whose source `topic` is.
    pub(super) fn side_of(&self, topic: &str) -> Option<usize> {
        self.sides.iter().position(|s| s.source == topic)
    }

    /// Forgets the last batch's sends and failures.
    pub(super) fn begin_batch(&mut self) {
        self.failures.count.store(0, Ordering::Relaxed);
        self.failures
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.sent.clear();
    }

    /// Exactly-once: opens the batch's transaction unless it is open; a producer that cannot
    /// is made again (and the batch fails).
    pub(super) fn ensure_transaction(&mut self) -> Result<()> {
        let Some(t) = &self.transactions else {
            return Ok(());
        };
        if let Err(e) = t.ensure_open() {
            self.renew_producer(&format!("beginning a transaction: {e}"));
            anyhow::bail!("beginning a transaction: {e}");
        }
        Ok(())
    }

    /// Waits for every write of the batch; an error when one failed (what the failures say about
    /// their records is noted for when the batch is read again).
    pub(super) fn acknowledged(&mut self) -> Result<()> {
        // Not `flush`, which waits out 100 ms steps (kafka/acks.rs).
        let flushed = wait_delivered(&self.producer, Instant::now() + TIMEOUT);
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
        Ok(())
    }

    /// Whether the batch's offsets are committed by [`Writer::commit`] rather than by the
    /// consumer.
    pub(super) fn is_transactional(&self) -> bool {
        self.transactions.is_some()
    }

    /// Commits the batch's transaction with `offsets` of the consumer in `group`.
    pub(super) fn commit(
        &mut self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let Some(t) = &self.transactions else {
            return Ok(());
        };
        match t.commit(offsets, group, &mut no_keep_alive) {
            Outcome::Committed { .. } | Outcome::Nothing => {
                self.committed();
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

    /// Exactly-once: aborts the failed batch's transaction (`why` it failed).
    pub(super) fn abort(&mut self, why: &str) {
        let Some(t) = &self.transactions else { return };
        if let Outcome::Fatal(why) = t.abort(why, &mut no_keep_alive) {
            self.renew_producer(&why);
        }
    }

    /// The batch's dead letters are committed: their records are done with.
    pub(super) fn committed(&mut self) {
        for s in self.sent.iter().filter(|s| s.dead_letter) {
            self.refusals.forget(&s.pos);
        }
    }

    /// A transactional producer that failed for good (fenced after the broker timed its
    /// transaction out, say) may not write again: a new one takes its transactional id.
    fn renew_producer(&mut self, why: &str) {
        tracing::warn!("repartition producer: {why}; making a new one");
        match create_producer(&self.config, &self.failures) {
            Ok((producer, transactions)) => {
                self.producer = producer;
                self.transactions = transactions;
            }
            Err(e) => tracing::warn!(
                "making a new repartition producer: {e:#}; tried again with the next batch"
            ),
        }
    }

    /// One record to its internal topic, or to the dead-letter topic when it has no join key or
    /// the broker refused it for good before.
    pub(super) fn forward(&mut self, side_ix: usize, m: &OwnedMessage) -> Result<Fate> {
        let pos: Pos = (side_ix, m.partition(), m.offset());
        let next = self.refusals.next(&pos).map(|(n, why)| (n, why.to_owned()));
        let new_key = match key::select(&self.sides[side_ix].key, m.key(), m.payload()) {
            Ok(new_key) => new_key,
            Err(no_key) => return self.no_key(side_ix, m, &no_key),
        };
        if let Some((Next::DeadLetter(stripped), why)) = &next {
            return self.dead_letter_refused(side_ix, m, pos, why, *stripped);
        }
        let alone = next.is_some();
        if alone {
            // Every record before it delivered: it goes in a request of its own.
            anyhow::ensure!(
                wait_delivered(&self.producer, Instant::now() + TIMEOUT),
                "the records before it (written alone: refused before) were not all acknowledged within {TIMEOUT:?}"
            );
        }
        let partition = Partitioner::Murmur2.partition(&new_key, self.partitions);
        let index = self.track(pos, false, alone);
        let internal = &self.sides[side_ix].internal;
        let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(internal, index)
            .key(&new_key[..])
            .partition(partition);
        record.payload = m.payload();
        if let Some(ts) = m.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(h) = m.headers() {
            record = record.headers(h.clone());
        }
        match send_with_room(&self.producer, record) {
            Ok(()) => {}
            // Refused before it was sent (over message.max.bytes): its own fault, for good.
            Err(e) if refuses_whole_request(&e) => {
                let why = e.to_string();
                self.refusals.write_refused(pos, why.clone(), true);
                return self.dead_letter_refused(side_ix, m, pos, &why, Stripped::Nothing);
            }
            Err(e) => return Err(kafka_error(e)),
        }
        if alone {
            // Unacknowledged, it is not known to be written: its delivery report tells at commit.
            anyhow::ensure!(
                wait_delivered(&self.producer, Instant::now() + TIMEOUT),
                "written alone (refused before), it was not acknowledged within {TIMEOUT:?}"
            );
            if !self.failed_index(index) {
                self.refusals.written(&pos);
            }
        }
        Ok(Fate::Written)
    }

    /// Numbers a send for its delivery report.
    fn track(&mut self, pos: Pos, dead_letter: bool, alone: bool) -> usize {
        self.sent.push(Sent {
            pos,
            dead_letter,
            alone,
        });
        self.sent.len() - 1
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
        &mut self,
        side_ix: usize,
        m: &OwnedMessage,
        pos: Pos,
        why: &str,
        mut stripped: Stripped,
    ) -> Result<Fate> {
        let internal = &self.sides[side_ix].internal;
        let Some(dlq) = self.dead_letter_topic.clone() else {
            anyhow::bail!(
                "{}-{}@{} cannot be written to {internal}: {why}; set output.dead_letter_topic so that such a record is dead-lettered (the side waits behind it until then)",
                m.topic(), m.partition(), m.offset()
            );
        };
        let reason =
            format!("writing it re-keyed to the internal topic {internal} was refused: {why}");
        loop {
            tracing::warn!(record = %position(m), dead_letter_topic = %dlq, ?stripped, "dead-lettered: {reason}");
            match self.send_dead_letter(&dlq, m, pos, "output-refused", &reason, stripped) {
                Ok(()) => return Ok(Fate::DeadLettered),
                Err(e) => {
                    let more = if verdict(&e) == Verdict::Refused {
                        self.refusals.dead_letter_refused(&pos)
                    } else {
                        None
                    };
                    stripped = more.ok_or_else(|| kafka_error(e))?;
                }
            }
        }
    }

    /// A record without a join key: dead-lettered as `null-key` or dropped, as
    /// `join.null_keys` says.
    fn no_key(&mut self, side_ix: usize, m: &OwnedMessage, no_key: &NoKey) -> Result<Fate> {
        let side = &self.sides[side_ix];
        let reason = format!("no join key ({}): {}", side.key, no_key.reason());
        match (self.null_keys, self.dead_letter_topic.clone()) {
            (RecordPolicy::DeadLetter, Some(dlq)) => {
                tracing::info!(record = %position(m), dead_letter_topic = %dlq, "dead-lettered: {reason}");
                let pos = (side_ix, m.partition(), m.offset());
                self.send_dead_letter(&dlq, m, pos, "null-key", &reason, Stripped::Nothing)
                    .map_err(kafka_error)?;
                Ok(Fate::DeadLettered)
            }
            _ => {
                tracing::info!(record = %position(m), "dropped (join.null_keys = \"drop\"): {reason}");
                Ok(Fate::Dropped)
            }
        }
    }

    /// Sends `m` to the dead-letter topic `dlq` with its own headers, then the error's and the
    /// source record's (`kind`, `reason`), leaving out what `stripped` says.
    fn send_dead_letter(
        &mut self,
        dlq: &str,
        m: &OwnedMessage,
        pos: Pos,
        kind: &str,
        reason: &str,
        stripped: Stripped,
    ) -> Result<(), KafkaError> {
        let own = match (stripped, m.headers()) {
            (Stripped::KeyValueAndHeaders, _) | (_, None) => OwnedHeaders::new(),
            (_, Some(h)) => h.clone(),
        };
        let origin = (
            m.topic(),
            m.partition(),
            m.offset(),
            m.timestamp().to_millis().unwrap_or(0),
        );
        let headers = omission_headers(
            error_headers(own, kind, reason, None, origin),
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
        send_with_room(&self.producer, record)
    }

    /// What the failed deliveries of a batch say about its records: one refused for good is
    /// written alone, or dead-lettered, when the batch is read again; a dead letter refused
    /// leaves out more the next time.
    fn note_refusals(&mut self) {
        let failed = std::mem::take(
            &mut *self
                .failures
                .failed
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for (index, e) in failed {
            let Some(s) = self.sent.get(index) else {
                continue;
            };
            if s.dead_letter {
                if verdict(&e) == Verdict::Refused {
                    self.refusals.dead_letter_refused(&s.pos);
                }
            } else if refuses_whole_request(&e) {
                self.refusals.write_refused(s.pos, e.to_string(), s.alone);
            }
        }
    }
}

/// A source record's position, for logs and errors.
pub(super) fn position(m: &OwnedMessage) -> String {
    format!("{}-{}@{}", m.topic(), m.partition(), m.offset())
}

fn kafka_error(e: KafkaError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
