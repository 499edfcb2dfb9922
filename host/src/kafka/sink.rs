//! The producing side of a host: a round's outputs and dead letters sent, every acknowledgement
//! awaited, and what the producer or broker refuses for good turned over to the task that made it
//! (its inputs dead-lettered as `output-refused`) instead of stopping the host. Before this, one
//! output too large for the broker ended the host before it committed, and every restart replayed
//! the same input and ended again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::event::Event;
use crate::kafka::transaction::{is_fatal, KeepAlive, Outcome, Transactions};
use crate::metrics::Metrics;
use crate::report::Happened;
use crate::task::{Batch, Emit};

mod headers;
mod remembered;
mod topics;
mod verdict;

use headers::{dead_letter_headers, kafka_headers, log_dead_letter};
pub(crate) use headers::{error_headers, omission_headers};
use remembered::Remembered;
pub use topics::topic_exists;
use topics::KnownTopics;
pub(crate) use verdict::{refuses_whole_request, verdict, Verdict};

/// How long a round's records may take to be delivered, resends included.
const DELIVERY_BOUND: Duration = Duration::from_secs(60);

/// The join's output transactions: on the sink's producer.
pub type SinkTransactions = Transactions<Deliveries>;

/// What the delivery callback learns, keyed by the index each record was sent with.
#[derive(Default)]
pub struct Deliveries {
    failed: Mutex<Vec<(usize, KafkaError)>>,
    /// Outputs acknowledged by the broker.
    outputs: AtomicU64,
    /// Dead letters acknowledged by the broker.
    dead_letters: AtomicU64,
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        super::quiet::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        super::quiet::error(error, reason);
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;
    /// `opaque` is the record's index in the round, shifted left, with the low bit set for a
    /// dead letter.
    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let (index, dead_letter) = (opaque >> 1, opaque & 1 == 1);
        match result {
            Ok(_) if dead_letter => {
                self.dead_letters.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                self.outputs.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                tracing::debug!(topic = m.topic(), "delivery failed: {e}");
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.push((index, e.clone()));
            }
        }
    }
}

/// A record of the round: which batch and emit it comes from, and for a dead letter which input.
#[derive(Clone, Copy, Debug)]
struct Origin {
    batch: usize,
    emit: usize,
    /// `Some(i)`: the dead letter of input `i` of a `DeadLetter` emit.
    input: Option<usize>,
    /// How much of a dead letter's input is left out, after the whole was refused.
    stripped: Stripped,
    /// Sent in a produce request of its own: the broker refuses a whole request for one record
    /// in it (too large, a bad timestamp), so a record refused with others is sent again alone
    /// before it is called refused (11 of 13 innocent matches were dead-lettered).
    alone: bool,
}

/// A dead letter must always fit: refused whole, it is sent again without the input's value;
/// refused again (a key over the broker's limit: the host exited on every restart), without its
/// key and headers too, with the key's SHA-256 and the source position in headers. The input
/// stays in its source topic at that position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Stripped {
    #[default]
    Nothing,
    Value,
    KeyValueAndHeaders,
}

impl Stripped {
    /// What the next attempt leaves out after this one was refused; `None` when nothing more can
    /// go (the topic refuses everything). The sink's and the repartition step's one rule.
    pub(crate) fn more(self) -> Option<Stripped> {
        match self {
            Stripped::Nothing => Some(Stripped::Value),
            Stripped::Value => Some(Stripped::KeyValueAndHeaders),
            Stripped::KeyValueAndHeaders => None,
        }
    }
}

/// Records the broker has acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Acknowledged {
    pub outputs: u64,
    pub dead_letters: u64,
}

/// An output the broker refused for good: its task decides what becomes of its inputs
/// (dead-lettered as `output-refused`, or the task halts).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// Which of the delivered batches it was in.
    pub batch: usize,
    pub inputs: Vec<Arc<Event>>,
    /// Why, naming the topic.
    pub error: String,
}

/// How a round's delivery ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Delivered {
    /// Every record acknowledged but the outputs refused for good, returned for their tasks.
    Done(Vec<Refused>),
    /// Exactly-once: a delivery failed, which dooms the open transaction; it was aborted and the
    /// tasks must go back to their last committed points (the reason).
    Aborted(String),
    /// Exactly-once: the transactional producer was fenced or failed for good (why): nothing of
    /// its transaction is visible; a new producer takes over ([`Sink::renew`]) and the tasks go
    /// back to their last committed points.
    Fenced(String),
}

pub struct Sink {
    producer: Arc<BaseProducer<Deliveries>>,
    /// What the producer was made with, to make it again ([`Sink::renew`]).
    config: ClientConfig,
    /// Exactly-once: the transaction the records are produced in.
    transactions: Option<Arc<SinkTransactions>>,
    /// Exactly-once: outputs the broker refused, sent alone, in a transaction that was then
    /// aborted, by [`output_identity`], with why.
    refused_in_aborted: Remembered,
    /// Exactly-once: outputs refused in a request with others, in a transaction that was then
    /// aborted: the replay sends each alone, and only if it is refused then is it refused.
    suspects: Remembered,
    output_topic: String,
    dead_letter_topic: Option<String>,
    topics: KnownTopics,
    metrics: Arc<Metrics>,
    /// Who the broker sees this host as, for an authorisation error's message.
    principal: String,
}

impl Sink {
    /// A producer for `output_topic` (and the dead-letter topic); what happens to it is reported
    /// to `metrics`. With a `transactional_id` it produces in transactions (exactly-once).
    pub fn new(
        config: &ClientConfig,
        output_topic: &str,
        dead_letter_topic: Option<&str>,
        metrics: Arc<Metrics>,
        transactional_id: Option<&str>,
    ) -> Result<Self> {
        let mut config = config.clone();
        if let Some(id) = transactional_id {
            config.set("transactional.id", id);
            // A host killed with a transaction open blocks read_committed readers of the output
            // until the broker aborts it: 10 s, as Kafka Streams (librdkafka's default is 60 s).
            if config.get("transaction.timeout.ms").is_none() {
                config.set("transaction.timeout.ms", "10000");
            }
        }
        let producer: Arc<BaseProducer<Deliveries>> = Arc::new(
            config
                .create_with_context(Deliveries::default())
                .context("creating the Kafka producer")?,
        );
        let transactions = match transactional_id {
            Some(_) => Some(Arc::new(Transactions::init(producer.clone())?)),
            None => None,
        };
        Ok(Sink {
            producer,
            config,
            transactions,
            refused_in_aborted: Remembered::default(),
            suspects: Remembered::default(),
            output_topic: output_topic.to_owned(),
            dead_letter_topic: dead_letter_topic.map(str::to_owned),
            topics: KnownTopics::default(),
            metrics,
            principal: "<this host's principal>".to_owned(),
        })
    }

    /// Refuses to start when the output or dead-letter topic does not exist: every record would
    /// wait for it and then fail.
    pub fn verify_topics(&self) -> Result<()> {
        let named = [
            ("output.topic", Some(&self.output_topic)),
            ("output.dead_letter_topic", self.dead_letter_topic.as_ref()),
        ];
        for (field, topic) in named {
            let Some(topic) = topic else { continue };
            if !topic_exists(self.producer.client(), topic)? {
                bail!("{field} {topic:?} does not exist on the broker: create it (with the partitions and retention you want) before starting, or name an existing topic");
            }
        }
        Ok(())
    }

    /// Who the broker sees this host as ([`crate::acl::principal`]), named when it refuses a write.
    pub fn set_principal(&mut self, principal: String) {
        self.principal = principal;
    }

    /// An authorisation error writing a topic the config names (outputs, dead letters) is the
    /// operator's to fix, not the record's: dead-lettering every output would lose none but
    /// bury the join in dead letters, and an exactly-once replay would abort for ever. The host
    /// stops without committing, naming the missing ACL. On a topic a plugin named (allowed by
    /// output.allowed_topics or by default), it is that output's refusal: `None`.
    fn unauthorized(
        &self,
        batches: &[(i32, Batch)],
        origin: Origin,
        e: &KafkaError,
    ) -> Option<anyhow::Error> {
        if verdict(e) != Verdict::Unauthorized {
            return None;
        }
        let (topic, why) = match &batches[origin.batch].1.emits[origin.emit] {
            Emit::Output { record, .. } => {
                let topic = record.topic.as_deref().unwrap_or(&self.output_topic);
                (topic == self.output_topic).then_some(())?;
                (topic, "outputs")
            }
            Emit::DeadLetter(_) => (self.dead_letter_topic.as_deref()?, "dead letters"),
        };
        let permission = crate::acl::Permission {
            resource: crate::acl::Resource::Topic(topic.to_owned()),
            operation: crate::acl::Operation::Write,
            unless_exists: false,
            why,
        };
        Some(anyhow::anyhow!(
            "{} (the broker refused a write: {e}); stopping without committing (a restart replays the uncommitted records once it is granted)",
            permission.missing_message(&self.principal)
        ))
    }

    /// Exactly-once: a new producer with the same transactional id in place of one fenced or
    /// failed for good (the broker aborted a transaction it found timed out, say, after a
    /// restart), as Kafka Streams makes a new one for a task's producer: registering it ends the
    /// old one's transaction, whose outputs no reader sees. The counts go on.
    pub fn renew(&mut self, keep_alive: KeepAlive<'_>) -> Result<()> {
        let Some(txn) = &self.transactions else {
            return Ok(());
        };
        let old = self.producer.context();
        let counts = Deliveries {
            outputs: AtomicU64::new(old.outputs.load(Ordering::Relaxed)),
            dead_letters: AtomicU64::new(old.dead_letters.load(Ordering::Relaxed)),
            ..Deliveries::default()
        };
        let producer: Arc<BaseProducer<Deliveries>> = Arc::new(
            self.config
                .create_with_context(counts)
                .context("making a new transactional producer")?,
        );
        txn.renew(producer.clone(), keep_alive)?;
        self.producer = producer;
        Ok(())
    }

    /// Exactly-once: the transactions this sink produces in (the source commits them).
    pub fn transactions(&self) -> Option<Arc<SinkTransactions>> {
        self.transactions.clone()
    }

    /// Outputs and dead letters the broker has acknowledged so far.
    pub fn acknowledged(&self) -> Acknowledged {
        let d = self.producer.context();
        Acknowledged {
            outputs: d.outputs.load(Ordering::Relaxed),
            dead_letters: d.dead_letters.load(Ordering::Relaxed),
        }
    }

    /// Produces the emits of `batches` from `from[b]` on in batch b (one batch per task) and
    /// waits for each acknowledgement. The outputs refused for good are returned
    /// ([`Delivered::Done`]), for their tasks to decide what becomes of their inputs (dead
    /// letters appended to the batch, delivered by a next call from where this one ended).
    /// Transient failures are sent again until they succeed.
    /// Returns an error only when the producer itself cannot go on, or a dead letter is refused
    /// even without its value; nothing is committed then, so a restart replays it.
    ///
    /// While it waits on the broker, `keep_alive` polls the consumer (librdkafka leaves the group
    /// when it is not polled for `max.poll.interval.ms`).
    pub fn deliver(
        &mut self,
        batches: &[(i32, Batch)],
        from: &[usize],
        keep_alive: KeepAlive<'_>,
    ) -> Result<Delivered> {
        let mut queue: Vec<Origin> = Vec::new();
        for (b, (_, batch)) in batches.iter().enumerate() {
            let first = from.get(b).copied().unwrap_or(0);
            for (e, emit) in batch.emits.iter().enumerate().skip(first) {
                push_origins(&mut queue, b, e, emit);
            }
        }
        let mut refused_outputs: Vec<Refused> = Vec::new();
        let mut backoff = Duration::from_millis(100);
        // Past this, the host stops without committing (a restart replays): it polls no records
        // while it waits, and past max.poll.interval.ms (300 s) the group would give its tasks
        // to another member while it still produced.
        let give_up = Instant::now() + DELIVERY_BOUND;
        let transactions = self.transactions.clone();
        // A revoke callback run by keep_alive leaves the transaction to this call (source.rs).
        let _waiting = transactions.as_ref().map(|t| t.waiting());
        if let (Some(txn), false) = (&transactions, queue.is_empty()) {
            if let Err(e) = txn.ensure_open() {
                if is_fatal(&e) {
                    return Ok(Delivered::Fenced(format!("beginning a transaction: {e}")));
                }
                bail!("beginning a transaction: {e}; stopping without committing");
            }
        }
        while !queue.is_empty() {
            let mut sent = std::mem::take(&mut queue);
            for origin in &mut sent {
                origin.alone |= self.suspect(batches, *origin);
            }
            let mut refused: Vec<(Origin, String)> = Vec::new();
            let mut resend: Vec<Origin> = Vec::new();
            // The others together first, then each record that must go alone on its own: every
            // record before it is delivered, and it is delivered before the next is sent.
            for alone in [false, true] {
                for (i, origin) in sent.iter().enumerate().filter(|(_, o)| o.alone == alone) {
                    match self.send(batches, *origin, i) {
                        Ok(()) => {}
                        Err(e) => match e {
                            SendError::Refused(why) => refused.push((*origin, why)),
                            SendError::Kafka(e) => {
                                if let Some(stop) = self.unauthorized(batches, *origin, &e) {
                                    return Err(stop);
                                }
                                match verdict(&e) {
                                    Verdict::Refused | Verdict::Unauthorized => {
                                        refused.push((*origin, e.to_string()))
                                    }
                                    Verdict::Fatal if transactions.is_some() => {
                                        return Ok(Delivered::Fenced(format!("producing: {e}")))
                                    }
                                    Verdict::Fatal => bail!("the producer failed for good: {e}; stopping without committing (a restart replays the uncommitted records)"),
                                    Verdict::Transient => resend.push(*origin),
                                }
                            }
                        },
                    }
                    if alone {
                        self.await_in_flight(keep_alive)?;
                    }
                }
                if !alone {
                    self.await_in_flight(keep_alive)?;
                }
            }
            let failed = std::mem::take(
                &mut *self
                    .producer
                    .context()
                    .failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            for (i, e) in &failed {
                if let Some(stop) = self.unauthorized(batches, sent[*i], e) {
                    return Err(stop);
                }
            }
            if let (Some(txn), Some((_, e))) = (&transactions, failed.first()) {
                // The replay will make the same outputs: one the broker refused for good is
                // remembered, and refused before it is sent again (its inputs dead-lettered), or
                // every replay would abort again.
                // One refused with others in its request is a suspect only: the replay sends it
                // alone (its companions go through), and only then is it refused.
                for (i, e) in &failed {
                    let origin = sent[*i];
                    if !matches!(verdict(e), Verdict::Refused | Verdict::Unauthorized) {
                        continue;
                    }
                    if let Some(identity) = self.identity(batches, origin) {
                        let now = Instant::now();
                        if refuses_whole_request(e) && !origin.alone {
                            self.suspects.insert(identity, e.to_string(), now);
                        } else {
                            self.suspects.forget(&identity);
                            self.refused_in_aborted.insert(identity, e.to_string(), now);
                        }
                    }
                }
                // In a transaction a failed delivery fails the transaction: nothing of it may be
                // committed, so it is aborted and the tasks replay from their commits.
                return Ok(
                    match txn.abort(&format!("a delivery failed: {e}"), keep_alive) {
                        Outcome::Fatal(why) => Delivered::Fenced(why),
                        outcome => Delivered::Aborted(format!("{outcome:?}")),
                    },
                );
            }
            for (i, e) in failed {
                let origin = sent[i];
                match verdict(&e) {
                    Verdict::Refused if refuses_whole_request(&e) && !origin.alone => {
                        resend.push(Origin {
                            alone: true,
                            ..origin
                        })
                    }
                    Verdict::Refused | Verdict::Unauthorized => refused.push((origin, e.to_string())),
                    Verdict::Fatal => bail!("the producer failed for good: {e}; stopping without committing (a restart replays the uncommitted records)"),
                    Verdict::Transient => {
                        Happened::DeliveryRetried { error: &e }.emit(&self.metrics);
                        resend.push(origin);
                    }
                }
            }
            for (origin, why) in refused {
                let batch = &batches[origin.batch].1;
                let output = match &batch.emits[origin.emit] {
                    Emit::Output { record, inputs } => Some((
                        record
                            .topic
                            .as_deref()
                            .unwrap_or(&self.output_topic)
                            .to_owned(),
                        inputs.clone(),
                    )),
                    Emit::DeadLetter(_) => None,
                };
                if let Some((topic, inputs)) = output {
                    let error = format!("producing to {topic:?} was refused: {why}");
                    tracing::warn!(
                        key = %crate::event::printable_key(inputs[0].key_bytes()),
                        records = %crate::event::positions(inputs.iter().map(|e| &**e)),
                        "an output was refused: {error}"
                    );
                    refused_outputs.push(Refused {
                        batch: origin.batch,
                        inputs,
                        error,
                    });
                } else if let Some(more) = origin.stripped.more() {
                    if more == Stripped::Value {
                        tracing::warn!("a dead letter was refused ({why}); sending it again without its value (the record stays in its source topic)");
                    } else {
                        tracing::warn!("a dead letter was refused without its value ({why}); sending it again without its key and headers too (their SHA-256 and the source position are in its headers)");
                    }
                    queue.push(Origin {
                        stripped: more,
                        ..origin
                    });
                } else {
                    // Only a few hundred bytes of our own headers are left: the topic itself
                    // refuses everything (gone, or not writable).
                    bail!(
                        "a dead letter was refused by {:?} even without the input's key, value and headers: {why}; stopping without committing (check the dead-letter topic)",
                        self.dead_letter_topic.as_deref().unwrap_or_default()
                    );
                }
            }
            if !resend.is_empty() {
                if Instant::now() >= give_up {
                    bail!(
                        "{} outputs or dead letters could not be delivered within {} s; stopping without committing them (a restart replays them)",
                        resend.len(),
                        DELIVERY_BOUND.as_secs()
                    );
                }
                nap_alive(backoff, keep_alive);
                backoff = (backoff * 2).min(Duration::from_secs(5));
                queue.extend(resend);
            }
        }
        Ok(Delivered::Done(refused_outputs))
    }

    fn await_in_flight(&self, keep_alive: KeepAlive<'_>) -> Result<()> {
        // Not `flush`, which polls in 100 ms steps: every flush took at least 100 ms (seen on
        // the mock cluster: a task capped at 10 batches a second). librdkafka would retry a
        // record for message.timeout.ms (300 s); the host gives up sooner (see DELIVERY_BOUND).
        let deadline = Instant::now() + DELIVERY_BOUND;
        if !super::acks::wait_delivered_alive(&self.producer, deadline, keep_alive) {
            bail!("outputs not acknowledged within {} s; stopping without committing them (a restart replays them)", DELIVERY_BOUND.as_secs());
        }
        Ok(())
    }

    /// An output's [`output_identity`]; `None` for a dead letter.
    fn identity(&self, batches: &[(i32, Batch)], origin: Origin) -> Option<String> {
        match &batches[origin.batch].1.emits[origin.emit] {
            Emit::Output { record, inputs } => Some(output_identity(
                record.topic.as_deref().unwrap_or(&self.output_topic),
                inputs,
            )),
            Emit::DeadLetter(_) => None,
        }
    }

    /// Exactly-once: an output refused with others in an aborted transaction, to send alone.
    fn suspect(&mut self, batches: &[(i32, Batch)], origin: Origin) -> bool {
        !self.suspects.is_empty()
            && self
                .identity(batches, origin)
                .is_some_and(|id| self.suspects.meet(&id, Instant::now()).is_some())
    }

    fn send(
        &mut self,
        batches: &[(i32, Batch)],
        origin: Origin,
        index: usize,
    ) -> Result<(), SendError> {
        let emit = &batches[origin.batch].1.emits[origin.emit];
        match (emit, origin.input) {
            (Emit::Output { record: r, inputs }, _) => {
                let topic = r.topic.as_deref().unwrap_or(&self.output_topic);
                if !self.refused_in_aborted.is_empty() {
                    if let Some(why) = self
                        .refused_in_aborted
                        .meet(&output_identity(topic, inputs), Instant::now())
                    {
                        return Err(SendError::Refused(why));
                    }
                }
                if r.topic.is_some() && self.topics.missing(&self.producer, topic) {
                    return Err(SendError::Refused(format!(
                        "topic {topic:?} does not exist (create it, or write to another topic)"
                    )));
                }
                let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, index << 1)
                    .headers(kafka_headers(&r.headers));
                record.key = r.key.as_deref();
                record.payload = r.value.as_deref();
                self.send_record(record)
            }
            (Emit::DeadLetter(d), Some(i)) => {
                let Some(dlq) = self.dead_letter_topic.as_deref() else {
                    // Config validation requires the topic whenever a policy dead-letters.
                    return Err(SendError::Refused(
                        "no output.dead_letter_topic is set".to_owned(),
                    ));
                };
                let input = &d.inputs[i];
                log_dead_letter(d, input, dlq);
                let headers = dead_letter_headers(d, input, origin.stripped);
                let mut record =
                    BaseRecord::<[u8], [u8], usize>::with_opaque_to(dlq, index << 1 | 1)
                        .headers(headers);
                if origin.stripped != Stripped::KeyValueAndHeaders {
                    record.key = input.key.as_deref();
                }
                if origin.stripped == Stripped::Nothing {
                    record.payload = input.value.as_deref();
                }
                self.send_record(record)
            }
            (Emit::DeadLetter(_), None) => unreachable!("dead letters are sent per input"),
        }
    }

    fn send_record(&self, record: BaseRecord<'_, [u8], [u8], usize>) -> Result<(), SendError> {
        send_with_room(&self.producer, record).map_err(SendError::Kafka)
    }
}

/// Sleeps `period`, calling `keep_alive` every [`super::acks::KEEP_ALIVE_EVERY`].
fn nap_alive(period: Duration, keep_alive: KeepAlive<'_>) {
    let until = Instant::now() + period;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(super::acks::KEEP_ALIVE_EVERY));
        keep_alive();
    }
}

/// Sends `record`, waiting while the producer's local queue is full (polling for deliveries
/// frees it); any other refusal is returned.
pub fn send_with_room<C, K, P>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, K, P, C::DeliveryOpaque>,
) -> Result<(), KafkaError>
where
    C: ProducerContext,
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

enum SendError {
    /// Refused before sending, with the reason.
    Refused(String),
    Kafka(KafkaError),
}

/// What makes an output the same output again in a replay: its topic and the records it came from.
fn output_identity(topic: &str, inputs: &[std::sync::Arc<Event>]) -> String {
    format!(
        "{topic} {}",
        crate::event::positions(inputs.iter().map(|e| &**e))
    )
}

fn push_origins(queue: &mut Vec<Origin>, batch: usize, emit: usize, e: &Emit) {
    let origin = |input| Origin {
        batch,
        emit,
        input,
        stripped: Stripped::Nothing,
        alone: false,
    };
    match e {
        Emit::Output { .. } => queue.push(origin(None)),
        Emit::DeadLetter(d) => queue.extend((0..d.inputs.len()).map(|i| origin(Some(i)))),
    }
}
