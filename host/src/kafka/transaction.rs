//! Exactly-once: a round's outputs and dead letters, and the input offsets they come from, in one
//! Kafka transaction per commit interval (as Kafka Streams' `exactly_once_v2`). The join state is
//! rebuilt from the input topics, so outputs plus offsets committed atomically are the whole
//! story: a crash, an abort or a fenced zombie leaves nothing a `read_committed` reader sees twice.
//!
//! One transactional producer per host. Fencing is by the consumer group's metadata (KIP-447):
//! offsets sent with a stale generation are refused, so a host whose tasks moved cannot commit
//! their offsets; and a restarted static member (`kafka.instance_id`, whose transactional id is
//! derived from it) fences its predecessor when it starts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::TopicPartitionList;

use super::timeouts::COORDINATED as TIMEOUT;
/// A transactional call waits on the broker in steps this long, the consumer polled between them
/// (librdkafka leaves the group when it is not polled for `max.poll.interval.ms`).
const STEP: Duration = Duration::from_millis(500);

/// How long after a commit (or abort) the next transaction's first output waits. The broker's
/// coordinator answers the commit once it has decided it, then writes its markers; asked to add
/// a partition to the next transaction before they are written it answers
/// CONCURRENT_TRANSACTIONS, and librdkafka 2.12 asks again only after a fixed 20 ms
/// (rdkafka_txnmgr.c), which the round waits out for its outputs' acknowledgements. At 100
/// orders/s (`make bench-latency`) that was every transaction's first output: the records that
/// arrive during a commit are handled right after it. On the test broker the markers take 1-3 ms.
const MARKERS_SETTLE: Duration = Duration::from_millis(4);

/// What the run loop does while it waits on the broker: polls the consumer (kafka/intake/ahead.rs).
pub type KeepAlive<'a> = &'a mut dyn FnMut();

/// For a call made where the consumer cannot be polled (a rebalance callback).
pub fn no_keep_alive() {}

/// Runs `call` in steps of [`STEP`], `keep_alive` between them, until it succeeds, fails
/// otherwise, or [`TIMEOUT`] passed: librdkafka resumes a timed-out init, commit or abort where
/// it was, and sends a timed-out offsets request again.
fn in_steps(
    keep_alive: KeepAlive<'_>,
    mut call: impl FnMut(Duration) -> KafkaResult<()>,
) -> KafkaResult<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match call(STEP) {
            Err(KafkaError::Transaction(e)) if e.is_retriable() && Instant::now() < deadline => {
                keep_alive()
            }
            other => return other,
        }
    }
}

/// How a commit ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Outputs and offsets are visible to `read_committed` readers; `took` for the metrics.
    Committed { took: Duration },
    /// Nothing to commit (no transaction open, no offsets).
    Nothing,
    /// The transaction was aborted (the reason): its outputs are discarded and the tasks must
    /// go back to their last committed points.
    Aborted(String),
    /// This producer is fenced or failed for good: it may not produce again.
    Fatal(String),
}

/// A transactional producer: the host's, shared by the sink (which produces in it) and the source
/// (which commits it, also from the revoke callback); and the repartition step's own. A producer
/// fenced or failed for good is replaced by a new one with the same transactional id
/// ([`Transactions::renew`]).
pub struct Transactions<C: ProducerContext + 'static> {
    producer: RwLock<Arc<BaseProducer<C>>>,
    open: AtomicBool,
    /// The run loop is in a call that polls the consumer while it waits (a delivery, a commit):
    /// a revoke callback run by such a poll must leave the transaction to that call.
    waiting: AtomicBool,
    /// When the last transaction ended (its markers being written): see [`MARKERS_SETTLE`].
    ended: Mutex<Option<Instant>>,
}

/// Clears [`Transactions::waiting`] when the call that set it ends.
pub struct Waiting<'a>(&'a AtomicBool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<C: ProducerContext + 'static> Transactions<C> {
    /// Registers the transactional id with the broker (fencing any earlier producer with it).
    pub fn init(producer: Arc<BaseProducer<C>>) -> anyhow::Result<Transactions<C>> {
        init(&producer, &mut no_keep_alive)?;
        Ok(Transactions {
            producer: RwLock::new(producer),
            open: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            ended: Mutex::new(None),
        })
    }

    /// The producer outputs are sent with now.
    pub fn producer(&self) -> Arc<BaseProducer<C>> {
        self.producer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes `producer`, made with the same transactional id, in place of one fenced or failed
    /// for good: registering it fences the old one and ends its open transaction, if any.
    pub fn renew(
        &self,
        producer: Arc<BaseProducer<C>>,
        keep_alive: KeepAlive<'_>,
    ) -> anyhow::Result<()> {
        init(&producer, keep_alive)?;
        *self.producer.write().unwrap_or_else(|e| e.into_inner()) = producer;
        self.open.store(false, Ordering::Release);
        Ok(())
    }

    /// Marks the run loop as waiting in a call that polls the consumer, until the guard drops.
    pub fn waiting(&self) -> Waiting<'_> {
        self.waiting.store(true, Ordering::Release);
        Waiting(&self.waiting)
    }

    /// Whether the run loop waits in a call that polls the consumer ([`Transactions::waiting`]).
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Whether a transaction is open (something was produced since the last commit).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Opens a transaction unless one is open; outputs are produced in it.
    pub fn ensure_open(&self) -> KafkaResult<()> {
        if !self.open.load(Ordering::Acquire) {
            let ended = *self.ended.lock().unwrap_or_else(|e| e.into_inner());
            let settle = ended.map_or(Duration::ZERO, |t| settle_left(t.elapsed()));
            if !settle.is_zero() {
                std::thread::sleep(settle);
            }
            self.producer().begin_transaction()?;
            self.open.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Commits the open transaction with `offsets` (the tasks' commit points, metadata included)
    /// as the consumer group `group` sees them.
    pub fn commit(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        keep_alive: KeepAlive<'_>,
    ) -> Outcome {
        if offsets.count() == 0 && !self.open.load(Ordering::Acquire) {
            return Outcome::Nothing;
        }
        let started = Instant::now();
        if let Err(e) = self.ensure_open() {
            return self.failed(e, keep_alive);
        }
        let producer = self.producer();
        let sent = if offsets.count() > 0 {
            in_steps(keep_alive, |step| {
                producer.send_offsets_to_transaction(offsets, group, step)
            })
        } else {
            Ok(())
        };
        let result =
            sent.and_then(|()| in_steps(keep_alive, |step| producer.commit_transaction(step)));
        match result {
            Ok(()) => {
                self.ended();
                Outcome::Committed {
                    took: started.elapsed(),
                }
            }
            Err(e) => self.failed(e, keep_alive),
        }
    }

    /// Aborts the open transaction, if any (its outputs never become visible).
    pub fn abort(&self, why: &str, keep_alive: KeepAlive<'_>) -> Outcome {
        if !self.open.load(Ordering::Acquire) {
            return Outcome::Aborted(why.to_owned());
        }
        let producer = self.producer();
        match in_steps(keep_alive, |step| producer.abort_transaction(step)) {
            Ok(()) => {
                self.ended();
                Outcome::Aborted(why.to_owned())
            }
            Err(e) => Outcome::Fatal(format!("aborting a transaction ({why}) failed: {e}")),
        }
    }

    /// The open transaction was committed or aborted just now.
    fn ended(&self) {
        self.open.store(false, Ordering::Release);
        *self.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    fn failed(&self, e: KafkaError, keep_alive: KeepAlive<'_>) -> Outcome {
        if is_fatal(&e) {
            return Outcome::Fatal(format!(
                "the transactional producer was fenced or failed for good: {e} (fenced by a producer with the same transactional id, or an error librdkafka cannot recover from)"
            ));
        }
        // Anything else the transaction cannot survive: abort it, and the tasks replay.
        self.abort(
            &format!("committing the transaction failed: {e}"),
            keep_alive,
        )
    }
}

/// How much longer a transaction begun `since` the last one ended waits: [`MARKERS_SETTLE`].
fn settle_left(since: Duration) -> Duration {
    MARKERS_SETTLE.saturating_sub(since)
}

/// Whether `e` leaves the transactional producer unable to go on (fenced, or failed for good).
pub fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.is_fatal())
}

/// Registers `producer`'s transactional id with the broker, waiting on it in steps.
fn init<C: ProducerContext>(
    producer: &BaseProducer<C>,
    keep_alive: KeepAlive<'_>,
) -> anyhow::Result<()> {
    in_steps(keep_alive, |step| producer.init_transactions(step)).map_err(|e| {
        anyhow::anyhow!("starting the transactional producer (output.guarantee = \"exactly-once\" needs Apache Kafka 2.5 or later with transactions enabled): {e}")
    })
}

/// The transactional id of a host's producer (the repartition step's: `group` is
/// `<group>-repartition`): derived from its static membership id when it has one (so a restart
/// fences the previous process), else unique to this process.
pub fn transactional_id(group: &str, instance_id: Option<&str>) -> String {
    match instance_id {
        Some(id) => format!("cojoin-{group}-{id}"),
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("cojoin-{group}-{}-{nanos:x}", std::process::id())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_member_keeps_its_transactional_id_and_others_get_their_own() {
        assert_eq!(transactional_id("g", Some("host-1")), "cojoin-g-host-1");
        let a = transactional_id("g", None);
        assert!(
            a.starts_with(&format!("cojoin-g-{}-", std::process::id())),
            "{a}"
        );
    }

    #[test]
    fn a_transaction_begun_right_after_the_last_waits_for_its_markers_only_that_long() {
        assert_eq!(settle_left(Duration::ZERO), MARKERS_SETTLE);
        assert_eq!(
            settle_left(Duration::from_millis(1)),
            MARKERS_SETTLE - Duration::from_millis(1)
        );
        assert_eq!(settle_left(MARKERS_SETTLE), Duration::ZERO);
        assert_eq!(settle_left(Duration::from_secs(1)), Duration::ZERO);
    }
}
