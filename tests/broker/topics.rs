//! A broker's topics: creating them (and waiting for their leaders), their watermarks, what a
//! group committed, and their partitions' log segments on disk.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::Kafka;

impl Kafka {
    /// Creates `topic` with `partitions` partitions and waits until every partition has a leader.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.create_topic_with(topic, partitions, &[]);
    }

    /// A topic with topic-level configs, e.g. `("max.message.bytes", "200")`.
    pub fn create_topic_with(&self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin: AdminClient<DefaultClientContext> =
            self.client().create().expect("an admin client");
        let new = configs.iter().fold(
            NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
            |t, (k, v)| t.set(k, v),
        );
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = futures_executor::block_on(admin.create_topics([&new], &options))
            .unwrap_or_else(|e| panic!("creating topic {topic}: {e}"));
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        self.wait_for_leaders(topic, partitions);
    }

    fn wait_for_leaders(&self, topic: &str, partitions: i32) {
        let consumer: BaseConsumer = self.client().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    let t = m.topics().first()?;
                    (t.error().is_none()
                        && t.partitions().len() == partitions as usize
                        && t.partitions().iter().all(|p| p.leader() >= 0))
                    .then_some(())
                })
                .is_some();
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {topic}: {partitions} partitions without leaders after 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The next offset of each partition of `topic` (its high watermark), from the broker.
    pub fn end_offsets(&self, topic: &str, partitions: i32) -> Vec<i64> {
        self.watermarks(topic, partitions)
            .into_iter()
            .map(|(_, high)| high)
            .collect()
    }

    /// (first offset still there, next offset) of each partition of `topic`.
    pub fn watermarks(&self, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
        let consumer: BaseConsumer = self.client().create().unwrap();
        (0..partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("watermarks of {topic}-{p}: {e}"))
            })
            .collect()
    }

    /// What `group` has committed for each partition of `topic`: (offset, metadata); offset -1
    /// where nothing is committed. Offsets of a transaction still open (an exactly-once host
    /// killed mid-transaction) are not committed: read_uncommitted asks the broker for the last
    /// stable commit rather than wait for that transaction's end (librdkafka's default,
    /// read_committed, asks for stable offsets only and times out while it is open).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<(i64, String)> {
        let consumer: BaseConsumer = (self.client())
            .set("group.id", group)
            .set("isolation.level", "read_uncommitted")
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("committed offsets of {group}: {e}"));
        (0..partitions)
            .map(|p| {
                let e = got.find_partition(topic, p).unwrap();
                let offset = match e.offset() {
                    rdkafka::Offset::Offset(o) => o,
                    _ => -1,
                };
                (offset, e.metadata().to_owned())
            })
            .collect()
    }
}

impl Kafka {
    /// The broker's directory of partition `p` of `topic`, where its log segments are
    /// (`tests/kafka/broker.sh` keeps its data in `<dir>/kafka/data`, beside this log,
    /// `<dir>/kafka.log`).
    pub fn partition_dir(&self, topic: &str, p: i32) -> PathBuf {
        self.log
            .with_file_name("kafka")
            .join("data")
            .join(format!("{topic}-{p}"))
    }

    /// Bytes of the log segments (`*.log`) of `topic`'s partitions on disk: what its records
    /// take, compressed as their producers wrote them.
    pub fn bytes_on_disk(&self, topic: &str, partitions: i32) -> u64 {
        (0..partitions)
            .flat_map(|p| {
                let dir = self.partition_dir(topic, p);
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"))
            })
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .map(|path| std::fs::metadata(&path).unwrap().len())
            .sum()
    }
}
