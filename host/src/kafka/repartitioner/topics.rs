//! The repartition step's topics, by admin and metadata requests: the source topics' partition
//! counts, the internal topics made (or checked) before the step starts, and their records the
//! join has committed past deleted as it goes.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::TIMEOUT;
use crate::config::Config;
use crate::kafka::client;
use crate::repartition::Plan;

/// The source topics' partition counts, read before anything else connects.
pub fn partition_counts(config: &Config) -> Result<Vec<usize>> {
    let reader: BaseConsumer = metadata_reader(config)?;
    (config.join.topics.iter())
        .map(|topic| client::topic_partitions(&reader, topic))
        .collect()
}

/// Creates each internal topic with the plan's partition count (the brokers' default
/// replication); one that exists must have that count.
pub(super) fn create_internal_topics(config: &Config, plan: &Plan) -> Result<()> {
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

/// Deletes the internal topics' records the join group has committed past.
pub(super) struct Truncation {
    /// The internal topics.
    topics: Vec<String>,
    partitions: usize,
    join_reader: BaseConsumer,
    admin: AdminClient<DefaultClientContext>,
}

impl Truncation {
    pub(super) fn new(config: &Config, plan: &Plan) -> Result<Truncation> {
        Ok(Truncation {
            topics: plan.sides.iter().map(|s| s.internal.clone()).collect(),
            partitions: plan.partitions,
            join_reader: client::reader(&config.kafka, &config.kafka.group_id)
                .create()
                .context("creating the reader of the join's committed offsets")?,
            admin: client::base(&config.kafka)
                .create()
                .context("creating an admin client")?,
        })
    }

    /// Deletes the internal topics' records below the join group's committed offsets (the first
    /// offset its recovery reads: its commit points stay behind what its state still needs).
    pub(super) fn run(&self) -> Result<()> {
        let mut wanted = TopicPartitionList::new();
        for topic in &self.topics {
            for p in 0..self.partitions as i32 {
                wanted.add_partition(topic, p);
            }
        }
        let committed = self
            .join_reader
            .committed_offsets(wanted, TIMEOUT)
            .context("reading the join group's committed offsets")?;
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
        let deleted = runtime()?
            .block_on(self.admin.delete_records(&below, &opts))
            .context("DeleteRecords")?;
        // The request succeeds as a whole even when partitions fail (leader moved, no ACL).
        let failed: Vec<String> = deleted
            .elements()
            .iter()
            .filter_map(|e| {
                let err = e.error().err()?;
                Some(format!("{} [{}]: {err}", e.topic(), e.partition()))
            })
            .collect();
        anyhow::ensure!(
            failed.is_empty(),
            "DeleteRecords failed for {} (tried again in {:?})",
            failed.join(", "),
            super::TRUNCATE_EVERY
        );
        Ok(())
    }
}
