//! A global table's reader (issue 33, `join.table.scope = "global"`): every host reads every
//! partition of the table topic into one [`SharedTable`] its tasks look rows up in, so the stream
//! needs neither co-partitioning nor repartitioning (Kafka Streams' GlobalKTable).
//!
//! [`GlobalTable::restore`] reads the topic from its beginning to the end offsets it has when
//! the host starts — the topic is the table's changelog — before the host joins its group, so
//! that no stream record is joined with a table still loading; it says what it read in the log
//! and on /metrics. Then [`GlobalTable::follow`] keeps applying the table's new records on a
//! thread of its own until the host stops: a stream record is joined with the rows the view
//! holds when it is processed (latest; the stream and the table are not in timestamp step, as
//! in Kafka Streams). Assigned, not subscribed: no group, no offsets committed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::client;
use super::source::event_of;
use super::timeouts::REQUEST;
use crate::config::Config;
use crate::event::Event;
use crate::join::table::{SharedTable, TableMode, TableState};
use crate::join::SpillDir;
use crate::metrics::Metrics;

/// Records applied under one lock of the table.
const BATCH: usize = 1024;

/// How often a restore says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

pub struct GlobalTable {
    consumer: BaseConsumer,
    table: Arc<SharedTable>,
    topic: Arc<str>,
    metrics: Arc<Metrics>,
    /// Records without a key were said in the log once (they cannot be rows).
    keyless_said: bool,
}

impl GlobalTable {
    /// Reads the whole table topic into a new shared table (bounded by `memory.state_bytes`, the
    /// rest in `spill`), up to the end offsets it has now.
    pub fn restore(config: &Config, metrics: Arc<Metrics>, spill: Arc<SpillDir>) -> Result<Self> {
        let table = config.join.table.as_ref().context("no join.table")?;
        let topic: Arc<str> = table.topic.as_str().into();
        let consumer: BaseConsumer =
            client::reader(&config.kafka, &format!("{}-global-table", config.kafka.group_id))
                .set("auto.offset.reset", "earliest")
                // A restore reads whole partitions: fetch more of each per request than the
                // default 1 MiB (1M rows of make bench-join-table: 6.9 s at 1 MiB, 2.9 s at
                // 8 MiB, 3.8 s at 16 MiB; one run each, the machine busy).
                .set("max.partition.fetch.bytes", "8388608")
                .create()
                .context("creating the Kafka client that reads the global table (check [kafka] and [kafka.options])")?;
        let partitions = client::topic_partitions(&consumer, &topic)?;
        if partitions == 0 {
            bail!(
                "the global table's topic {topic:?} (join.table.topic) does not exist: create it (a compacted topic keyed by the join key), or name the right topic"
            );
        }
        let mut assignment = TopicPartitionList::new();
        let mut ends = HashMap::new();
        for p in 0..partitions as i32 {
            assignment.add_partition_offset(&topic, p, Offset::Beginning)?;
            let (_, high) = consumer
                .fetch_watermarks(&topic, p, REQUEST)
                .with_context(|| format!("asking the end offset of {topic}-{p}"))?;
            ends.insert(p, high);
        }
        consumer
            .assign(&assignment)
            .with_context(|| format!("reading the global table {topic:?}"))?;
        let mut state = TableState::new(TableMode::Latest);
        state.spill_to(spill);
        state.set_ram_budget(usize::try_from(config.memory.state_bytes).unwrap_or(usize::MAX));
        let mut reader = GlobalTable {
            consumer,
            table: Arc::new(SharedTable::new(state)),
            topic,
            metrics,
            keyless_said: false,
        };
        reader.read_to(&ends)?;
        Ok(reader)
    }

    /// The view the tasks look rows up in.
    pub fn table(&self) -> Arc<SharedTable> {
        self.table.clone()
    }

    /// Reads until every partition's position reaches its end offset in `ends`.
    fn read_to(&mut self, ends: &HashMap<i32, i64>) -> Result<()> {
        let started = Instant::now();
        let mut said = started;
        let mut next: HashMap<i32, i64> = ends.keys().map(|&p| (p, 0)).collect();
        let mut records = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let behind = |next: &HashMap<i32, i64>| ends.iter().any(|(p, end)| next[p] < *end);
            if !behind(&next) {
                break;
            }
            let polled = self.poll_batch(&mut batch, Duration::from_millis(100));
            for event in &batch {
                next.insert(event.partition, event.offset + 1);
            }
            records += polled as u64;
            self.apply(&mut batch);
            if polled == 0 {
                // Past records compacted away or transaction markers at the end: no poll
                // delivers them, the position says.
                for e in self.consumer.position()?.elements() {
                    if let Offset::Offset(o) = e.offset() {
                        let at = next.entry(e.partition()).or_insert(0);
                        *at = (*at).max(o);
                    }
                }
            }
            if said.elapsed() >= PROGRESS_EVERY {
                said = Instant::now();
                tracing::info!(
                    target: "cojoin::report",
                    "global table {}: restoring, {records} records read so far",
                    self.topic
                );
            }
        }
        let took = started.elapsed();
        let (rows, bytes) = self.table.size();
        self.metrics.table_restored_records.inc_by(records);
        self.metrics
            .table_restore_seconds
            .inc_by(took.as_secs_f64());
        tracing::info!(
            target: "cojoin::report",
            "global table {} restored: {records} records read, {rows} rows, {bytes} bytes, in {:.2} s ({:.0} records/s)",
            self.topic,
            took.as_secs_f64(),
            records as f64 / took.as_secs_f64().max(1e-9)
        );
        Ok(())
    }

    /// Polls up to [`BATCH`] records into `batch` (waiting at most `wait` for the first), and
    /// says how many. A poll that fails is said and counted, and ends the batch: the consumer
    /// retries on its own.
    fn poll_batch(&mut self, batch: &mut Vec<Event>, wait: Duration) -> usize {
        let mut wait = wait;
        while batch.len() < BATCH {
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(m)) if m.key().is_none() => {
                    self.metrics.null_key_records.inc();
                    if !std::mem::replace(&mut self.keyless_said, true) {
                        tracing::warn!(
                            "global table {}: the record at {}-{} offset {} has no key and cannot be a row; skipped (counted in cojoin_null_key_records_total; said once)",
                            self.topic,
                            self.topic,
                            m.partition(),
                            m.offset()
                        );
                    }
                }
                Some(Ok(m)) => batch.push(event_of(&m, &self.topic)),
                Some(Err(e)) => {
                    self.metrics.consumer_errors.inc();
                    tracing::warn!("global table {}: {e} (the consumer retries)", self.topic);
                    break;
                }
            }
            wait = Duration::ZERO;
        }
        batch.len()
    }

    fn apply(&self, batch: &mut Vec<Event>) {
        if batch.is_empty() {
            return;
        }
        let done = self.table.upsert_all(batch.iter());
        batch.clear();
        self.metrics.table_updates.inc_by(done.applied);
        self.metrics.table_too_old.inc_by(done.too_old);
        let (rows, bytes) = self.table.size();
        self.metrics.table_rows.set(rows as i64);
        self.metrics.table_bytes.set(bytes as i64);
    }

    /// Applies the table's new records on a thread of its own, until the [`Following`] is
    /// dropped.
    pub fn follow(mut self) -> Result<Following> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("global-table".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                while !stopped.load(Ordering::Relaxed) {
                    self.poll_batch(&mut batch, Duration::from_millis(100));
                    self.apply(&mut batch);
                }
            })
            .context("starting the global table's reader thread")?;
        Ok(Following {
            stop,
            thread: Some(thread),
        })
    }
}

/// The reader thread of a global table; dropped, it stops and is waited for (a poll at most).
pub struct Following {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
