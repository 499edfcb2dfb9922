//! Reading a topic back: a [`Reader`] from the beginning by assignment (no group), and the
//! [`ReadRecord`]s it collects, with when each arrived.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;

use super::Kafka;

impl Kafka {
    /// A reader of one topic from the beginning, by assignment (no group to join).
    pub fn reader(&self, topic: &str, partitions: i32) -> Reader {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "e2e-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        Reader {
            consumer,
            records: Vec::new(),
        }
    }
}

impl Kafka {
    /// How many records each partition of `topic` holds now, read from its beginning to its end
    /// offset: fewer than the end offset once a compacted topic's cleaner removed some.
    pub fn records_held(&self, topic: &str, partitions: i32) -> Vec<usize> {
        let ends = self.end_offsets(topic, partitions);
        (0..partitions)
            .map(|p| {
                let consumer: BaseConsumer = self
                    .client()
                    .set("group.id", "e2e-reader")
                    .set("enable.auto.commit", "false")
                    .create()
                    .unwrap();
                let mut tpl = rdkafka::TopicPartitionList::new();
                tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
                    .unwrap();
                consumer.assign(&tpl).unwrap();
                let end = ends[p as usize];
                let deadline = Instant::now() + Duration::from_secs(30);
                let (mut held, mut next) = (0, 0);
                // The last record is in the active segment, which the cleaner leaves alone.
                while next < end {
                    assert!(
                        Instant::now() < deadline,
                        "{topic}-{p}: read to offset {next} of {end} in 30 s"
                    );
                    if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                        let m = m.unwrap_or_else(|e| panic!("reading {topic}-{p}: {e}"));
                        held += 1;
                        next = m.offset() + 1;
                    }
                }
                held
            })
            .collect()
    }
}

/// A record read back: key, value and headers as text.
#[derive(Clone, Debug)]
pub struct ReadRecord {
    /// When the reader got it (for gaps in processing).
    pub arrived: Instant,
    pub key: String,
    pub value: String,
    pub headers: Vec<(String, String)>,
}

impl ReadRecord {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Reader {
    consumer: BaseConsumer,
    /// Everything read so far, in arrival order.
    pub records: Vec<ReadRecord>,
}

impl Reader {
    /// Reads until `done(records so far)` holds or `timeout` passes; whether it held.
    pub fn read_while_not(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while !done(&self.records) {
            if Instant::now() >= deadline {
                return false;
            }
            self.poll_once(Duration::from_millis(100));
        }
        true
    }

    /// Reads until `done(records so far)` holds; panics with `what` after `timeout`.
    pub fn read_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> &[ReadRecord] {
        let deadline = Instant::now() + timeout;
        while !done(&self.records) {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached after {timeout:?} ({} records read)",
                self.records.len()
            );
            self.poll_once(Duration::from_millis(100));
        }
        &self.records
    }

    /// Reads whatever arrives during `period`.
    pub fn read_for(&mut self, period: Duration) -> &[ReadRecord] {
        let until = Instant::now() + period;
        while Instant::now() < until {
            self.poll_once(Duration::from_millis(100));
        }
        &self.records
    }

    fn poll_once(&mut self, timeout: Duration) {
        let Some(result) = self.consumer.poll(timeout) else {
            return;
        };
        let m = match result {
            Ok(m) => m,
            // The broker away (a test restarting it): the consumer reconnects by itself.
            Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown,
            )) => return,
            Err(e) => panic!("reading from Kafka: {e}"),
        };
        let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), text(h.value)))
                    .collect()
            })
            .unwrap_or_default();
        self.records.push(ReadRecord {
            arrived: Instant::now(),
            key: text(m.key()),
            value: text(m.payload()),
            headers,
        });
    }
}
