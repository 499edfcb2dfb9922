//! The consuming side of a host: one consumer in the join's group, subscribed to both topics with
//! the range assignor (partition p of each on the same member). It hands the intake
//! (kafka/intake.rs) records as events, rebalances as revoked and assigned partitions (with the
//! commit points they start from), end offsets and lag, and commits the points the tasks publish.
//!
//! Rebalance callbacks run inside `poll`, between processing rounds; on revoke they commit the
//! last published points of the revoked partitions before those go, so the next owner starts
//! where this one stopped.
//!
//! This file holds the [`Source`] itself: making it, subscribing, polling records (and the
//! consumer's fatal and authorisation errors), its member id and closing. Its other methods are
//! split by concern:
//!
//! - [`rebalance`]: the state the rebalance callbacks share with the loop, the callbacks (the
//!   revoke-time commit), and the changes the loop takes from them ([`Rebalanced`]).
//! - [`commit`]: commit points — read back for new tasks, published by the tasks, committed
//!   (through the consumer, or the exactly-once transaction) — and each outcome reported.
//! - [`pause`]: pausing and resuming partitions (which are paused is the intake's to know).
//! - [`seek`]: moving fetch positions back (one partition, or a whole task before it resumes).
//! - [`watermarks`]: end offsets as last fetched, and lag (the broker is asked on a client of
//!   its own: kafka/intake/asks.rs).

mod commit;
mod pause;
mod rebalance;
mod seek;
mod watermarks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::event::{Event, Side};
use crate::kafka::sink::SinkTransactions;
use crate::metrics::Metrics;
use crate::report::Happened;

use rebalance::{RebalanceContext, Shared};

pub use rebalance::Rebalanced;

use super::timeouts::REQUEST as TIMEOUT;

/// A consumed record, as a task takes it.
pub struct Record {
    pub side: Side,
    pub event: Event,
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
    topics: Vec<Arc<str>>,
    /// The consumer group, and who the broker sees this host as: named when the broker refuses.
    group: String,
    principal: String,
    /// A table join: the topic (by index) every task reads from its beginning, being its
    /// table's changelog, whatever was committed on it.
    from_start: Option<usize>,
}

impl Source {
    /// A consumer for the join's `topics` (in order), not yet subscribed; what happens to it is
    /// reported to `metrics`.
    pub fn new(
        config: &ClientConfig,
        topics: &[String],
        metrics: Arc<Metrics>,
        transactions: Option<Arc<SinkTransactions>>,
    ) -> Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let topics: Vec<Arc<str>> = topics.iter().map(|t| t.as_str().into()).collect();
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
            group: config.get("group.id").unwrap_or_default().to_owned(),
            principal: "<this host's principal>".to_owned(),
            from_start: None,
        })
    }

    /// Who the broker sees this host as ([`crate::acl::principal`]), named when it refuses a read.
    /// A table join: every task reads `side`'s partition from its beginning (its table's
    /// changelog), not from the offset committed there, which only shows the group's lag.
    pub fn read_from_start(&mut self, side: Side) {
        self.from_start = Some(side.index());
    }

    /// Whether a task's partitions must be sought to its start points when it starts (a table
    /// join's table is read from its beginning).
    pub fn reads_from_start(&self) -> bool {
        self.from_start.is_some()
    }

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
        let topics: Vec<&str> = self.topics.iter().map(|t| &**t).collect();
        self.consumer
            .subscribe(&topics)
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
        let side = side_of(&self.topics, m.topic());
        Record {
            side,
            event: event_of(m, &self.topics[side.index()]),
        }
    }

    /// How many topics the join reads.
    pub fn topic_count(&self) -> usize {
        self.topics.len()
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

/// Locks the state the rebalance callbacks share with the loop (a poisoned lock is taken as it
/// is). Here, not in rebalance.rs, so that commit.rs and rebalance.rs do not import each other.
fn lock(
    shared: &std::sync::Mutex<rebalance::Shared>,
) -> std::sync::MutexGuard<'_, rebalance::Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The side of a record of `topic`: its place among the join's `topics`. The consumer is
/// subscribed to those alone, so any other topic is a bug.
pub(crate) fn side_of(topics: &[Arc<str>], topic: &str) -> Side {
    let at = topics.iter().position(|t| **t == *topic);
    Side::of(at.expect("the consumer reads the join's topics only"))
}
