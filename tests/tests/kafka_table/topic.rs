//! The table's topic on the broker: producing the script's records (tombstones included), reading
//! the topic back from its beginning, and the wait until the broker's cleaner compacted phase 1.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::scenario::PARTITIONS;

use super::script::{Order, Script, Update};

/// The table's topic: compacted, a segment rolled once a record is stamped a minute past the
/// segment's first (Kafka rolls by record timestamps), cleaned as soon as 1 % of it is dirty,
/// deletions kept 1 s after their first cleaning; records stamped within 20 minutes of the wall
/// clock are not compacted (phase 2's, from 10 minutes ago: see the module doc).
const TABLE_TOPIC: [(&str, &str); 5] = [
    ("cleanup.policy", "compact"),
    ("segment.ms", "60000"),
    ("min.cleanable.dirty.ratio", "0.01"),
    ("delete.retention.ms", "1000"),
    ("min.compaction.lag.ms", "1200000"),
];

/// The log cleaner looks for work every half second, not every 15 s.
const BROKER_SETTINGS: &str = "log.cleaner.backoff.ms=500";

/// Sends one record (`value` `None`: a tombstone), waiting while the producer's queue is full.
fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    key: &str,
    value: Option<&str>,
    ts: i64,
    partition: Option<i32>,
) {
    let mut record = BaseRecord::<str, str>::to(topic).key(key).timestamp(ts);
    if let Some(value) = value {
        record = record.payload(value);
    }
    record.partition = partition;
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((e, _)) => panic!("producing to {topic}: {e}"),
        }
    }
}

fn flush(producer: &ThreadedProducer<DefaultProducerContext>) {
    producer
        .flush(Duration::from_secs(30))
        .expect("every record acknowledged within 30 s");
}

pub fn produce_updates(producer: &ThreadedProducer<DefaultProducerContext>, updates: &[Update]) {
    for u in updates {
        let value = u.version.map(|v| format!("{{\"v\":{v}}}"));
        send(producer, "payments", &u.key, value.as_deref(), u.ts, None);
    }
    flush(producer);
}

pub fn produce_orders(producer: &ThreadedProducer<DefaultProducerContext>, orders: &[Order]) {
    for o in orders {
        let value = format!("{{\"n\":{}}}", o.n);
        send(producer, "orders", &o.key, Some(&value), o.ts, None);
    }
    flush(producer);
}

/// A record read back from the table's topic.
#[derive(Clone)]
struct TableRecord {
    offset: i64,
    key: String,
    tombstone: bool,
}

/// Every record of `topic` from its beginning up to its end offset, per partition.
fn read_from_beginning(kafka: &Kafka, topic: &str) -> Vec<Vec<TableRecord>> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("group.id", "e2e-table-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let ends = kafka.end_offsets(topic, PARTITIONS);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut records = vec![Vec::new(); PARTITIONS as usize];
    // A compacted partition's last record is never removed (the active segment is not cleaned):
    // reading up to it reads the partition whole.
    let mut next = vec![0i64; PARTITIONS as usize];
    let deadline = Instant::now() + Duration::from_secs(30);
    while (0..PARTITIONS as usize).any(|p| next[p] < ends[p]) {
        assert!(
            Instant::now() < deadline,
            "{topic} not read to its end offsets {ends:?} in 30 s (at {next:?})"
        );
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.unwrap_or_else(|e| panic!("reading {topic}: {e}"));
        let p = m.partition() as usize;
        next[p] = m.offset() + 1;
        records[p].push(TableRecord {
            offset: m.offset(),
            key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
            tombstone: m.payload().is_none(),
        });
    }
    records
}

/// The broker, with phase 1 of the table compacted.
pub struct Table {
    pub kafka: Kafka,
    /// Per partition of `payments`: the records compaction left of phase 1 (with the rolls).
    pub compacted: Vec<usize>,
    /// Per partition of `payments`: its end offset after phase 1, where phase 2 begins.
    pub phase2_from: Vec<i64>,
}

impl Table {
    /// Phase 2 of the table as it was produced: no record removed by compaction, which the
    /// expected rows count on. Checked after the outputs: a failure here says the test's premise
    /// broke (the run took longer than `min.compaction.lag.ms` allows), not the host.
    pub fn assert_phase2_intact(&self) {
        let ends = self.kafka.end_offsets("payments", PARTITIONS);
        let produced: i64 = (0..PARTITIONS as usize)
            .map(|p| ends[p] - self.phase2_from[p])
            .sum();
        let read = read_from_beginning(&self.kafka, "payments");
        let kept = (0..PARTITIONS as usize)
            .map(|p| {
                (read[p].iter())
                    .filter(|r| r.offset >= self.phase2_from[p])
                    .count()
            })
            .sum::<usize>();
        assert_eq!(
            kept as i64, produced,
            "the broker compacted phase 2 of the table: min.compaction.lag.ms was too short for this run"
        );
    }
}

/// A broker with the join's topics (`orders` with `orders_partitions`, `payments` with
/// [`PARTITIONS`] and compacted); phase 1 of `script` in the table, and the broker's cleaner
/// through it: every partition read from its beginning holds each key once.
pub fn compacted_table(dir: &std::path::Path, script: &Script, orders_partitions: i32) -> Table {
    let kafka = Kafka::start_with(dir, BROKER_SETTINGS);
    kafka.create_topic("orders", orders_partitions);
    kafka.create_topic_with("payments", PARTITIONS, &TABLE_TOPIC);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    let producer = kafka.producer("murmur2_random");
    produce_updates(&producer, &script.phase1_updates);
    for p in 0..PARTITIONS {
        let key = format!("roll-{p}");
        send(
            &producer,
            "payments",
            &key,
            Some("{}"),
            script.roll_ts,
            Some(p),
        );
    }
    flush(&producer);
    let produced = script.phase1_updates.len() + PARTITIONS as usize;
    let t = Instant::now();
    let deadline = t + Duration::from_secs(90);
    loop {
        let read = read_from_beginning(&kafka, "payments");
        let total: usize = read.iter().map(Vec::len).sum();
        let repeated: usize = read
            .iter()
            .map(|records| {
                let keys: std::collections::BTreeSet<&str> =
                    records.iter().map(|r| r.key.as_str()).collect();
                records.len() - keys.len()
            })
            .sum();
        if repeated == 0 {
            let tombstones = read.iter().flatten().filter(|r| r.tombstone).count();
            eprintln!(
                "payments compacted by the broker after {:?}: {produced} records produced, {total} read from the beginning ({tombstones} tombstones), every key once",
                t.elapsed()
            );
            assert!(total < produced);
            let phase2_from = kafka.end_offsets("payments", PARTITIONS);
            return Table {
                kafka,
                compacted: read.iter().map(Vec::len).collect(),
                phase2_from,
            };
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not compact payments in 90 s: {total} of {produced} records read back, {repeated} older versions still there"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
