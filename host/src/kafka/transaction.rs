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
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::TopicPartitionList;

const TIMEOUT: Duration = Duration::from_secs(30);

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
/// (which commits it, also from the revoke callback); and the repartition step's own.
pub struct Transactions<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    open: AtomicBool,
}

impl<C: ProducerContext + 'static> Transactions<C> {
    /// Registers the transactional id with the broker (fencing any earlier producer with it).
    pub fn init(producer: Arc<BaseProducer<C>>) -> anyhow::Result<Transactions<C>> {
        producer.init_transactions(TIMEOUT).map_err(|e| {
            anyhow::anyhow!("starting the transactional producer (output.guarantee = \"exactly-once\" needs Apache Kafka 2.5 or later with transactions enabled): {e}")
        })?;
        Ok(Transactions {
            producer,
            open: AtomicBool::new(false),
        })
    }

    /// Whether a transaction is open (something was produced since the last commit).
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Opens a transaction unless one is open; outputs are produced in it.
    pub fn ensure_open(&self) -> anyhow::Result<()> {
        if !self.open.load(Ordering::Acquire) {
            self.producer
                .begin_transaction()
                .map_err(|e| anyhow::anyhow!("beginning a transaction: {e}"))?;
            self.open.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Commits the open transaction with `offsets` (the tasks' commit points, metadata included)
    /// as the consumer group `group` sees them.
    pub fn commit(&self, offsets: &TopicPartitionList, group: &ConsumerGroupMetadata) -> Outcome {
        if offsets.count() == 0 && !self.open.load(Ordering::Acquire) {
            return Outcome::Nothing;
        }
        let started = Instant::now();
        if let Err(e) = self.ensure_open() {
            return Outcome::Fatal(e.to_string());
        }
        let sent = if offsets.count() > 0 {
            self.producer
                .send_offsets_to_transaction(offsets, group, TIMEOUT)
        } else {
            Ok(())
        };
        let result = sent.and_then(|()| self.producer.commit_transaction(TIMEOUT));
        match result {
            Ok(()) => {
                self.open.store(false, Ordering::Release);
                Outcome::Committed {
                    took: started.elapsed(),
                }
            }
            Err(e) => self.failed(e),
        }
    }

    /// Aborts the open transaction, if any (its outputs never become visible).
    pub fn abort(&self, why: &str) -> Outcome {
        if !self.open.load(Ordering::Acquire) {
            return Outcome::Aborted(why.to_owned());
        }
        match self.producer.abort_transaction(TIMEOUT) {
            Ok(()) => {
                self.open.store(false, Ordering::Release);
                Outcome::Aborted(why.to_owned())
            }
            Err(e) => Outcome::Fatal(format!("aborting a transaction ({why}) failed: {e}")),
        }
    }

    fn failed(&self, e: KafkaError) -> Outcome {
        let fatal = matches!(&e, KafkaError::Transaction(t) if t.is_fatal());
        if fatal {
            return Outcome::Fatal(format!(
                "the transactional producer was fenced or failed for good: {e} (fenced by a producer with the same transactional id, or an error librdkafka cannot recover from)"
            ));
        }
        // Anything else the transaction cannot survive: abort it, and the tasks replay.
        self.abort(&format!("committing the transaction failed: {e}"))
    }
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
}
