//! An Apache Kafka broker started as a separate process for one test or benchmark (the
//! single-node KRaft broker of `tests/kafka/broker.sh`, on free loopback ports with a fresh log
//! directory), and the Kafka clients the tests use around it: admin, producer, reader.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use crate::stream::Record;

/// How long a broker may take to serve: a cold JVM on two busy cores takes 5-10 s.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// `tests/kafka/broker.sh`, the one place that knows how to run the broker.
pub fn broker_script() -> PathBuf {
    crate::root().join("tests/kafka/broker.sh")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One broker process; stopped (SIGKILL, its data is throwaway) when dropped.
pub struct Kafka {
    child: Child,
    pub bootstrap: String,
    /// The broker's own log (stdout and stderr).
    pub log: PathBuf,
}

impl Kafka {
    /// Starts a broker with its data under `dir/kafka`; returns once it answers metadata.
    pub fn start(dir: &Path) -> Kafka {
        // Two free ports picked apart can still collide with another process binding in between:
        // the script refuses a taken port, and a second attempt picks new ones.
        let mut last_failure = String::new();
        for _attempt in 0..3 {
            let (port, controller) = (free_port(), free_port());
            match Self::try_start(dir, port, controller) {
                Ok(kafka) => return kafka,
                Err(why) if why.contains("is taken") => last_failure = why,
                Err(why) => panic!("{why}"),
            }
        }
        panic!("{last_failure}")
    }

    fn try_start(dir: &Path, port: u16, controller: u16) -> Result<Kafka, String> {
        let log = dir.join("kafka.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(broker_script())
            .arg(dir.join("kafka"))
            .arg(port.to_string())
            .arg(controller.to_string())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .map_err(|e| format!("starting {:?}: {e}", broker_script()))?;
        let mut kafka = Kafka {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            log,
        };
        kafka.wait_ready()?;
        Ok(kafka)
    }

    /// Waits until the broker lists itself in a metadata response; a broker that exits or stays
    /// silent is reported with why (the script's own complaint, the Java version, the log's end).
    fn wait_ready(&mut self) -> Result<(), String> {
        let consumer: BaseConsumer = self.client().set("log_level", "0").create().unwrap();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(m) = consumer.fetch_metadata(None, Duration::from_secs(1)) {
                if !m.brokers().is_empty() {
                    return Ok(());
                }
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!(
                    "the Kafka broker on {} exited ({status}) before serving; {}",
                    self.bootstrap,
                    self.diagnosis()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the Kafka broker on {} is not serving after {START_TIMEOUT:?}; {}",
                    self.bootstrap,
                    self.diagnosis()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A client config pointed at this broker.
    fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        config
    }

    /// The Java version and the last lines of the broker's log, for a failure message.
    fn diagnosis(&self) -> String {
        let java = Command::new("java")
            .arg("-version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned()
            })
            .unwrap_or_else(|e| format!("no java: {e}"));
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let excerpt = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("java: {java}; log {:?} ends with:\n{excerpt}", self.log)
    }

    /// CPU seconds the broker process has used so far (user + system, from /proc): what serving a
    /// benchmark costs the broker on the same cores.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("reading the broker's /proc stat");
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let rest = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        // Clock ticks per second: 100 on Linux (sysconf(_SC_CLK_TCK)).
        ticks / 100.0
    }

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
    /// where nothing is committed.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<(i64, String)> {
        let consumer: BaseConsumer = self.client().set("group.id", group).create().unwrap();
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

    pub fn producer(&self, partitioner: &str) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_for(&self.bootstrap, partitioner)
    }

    /// A producer for the broker at `bootstrap`, for a thread that does not own the `Kafka`.
    /// Batches as librdkafka does by default.
    pub fn producer_for(
        bootstrap: &str,
        partitioner: &str,
    ) -> ThreadedProducer<DefaultProducerContext> {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("partitioner", partitioner)
            .create()
            .unwrap()
    }

    /// Produces `records`, keyed, to their topic; `partition` pins them when given.
    pub fn produce(
        &self,
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        Self::produce_with(producer, records, partition)
    }

    /// [`Kafka::produce`] without the broker at hand.
    pub fn produce_with(
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        for r in records {
            let mut record = BaseRecord::to(r.topic)
                .key(&r.key)
                .payload(&r.value)
                .timestamp(r.timestamp);
            record.partition = partition;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        assert!(
                            e.rdkafka_error_code()
                                == Some(rdkafka::types::RDKafkaErrorCode::QueueFull),
                            "producing to {}: {e}",
                            r.topic
                        );
                        record = back;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }

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

impl Drop for Kafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        let m = result.expect("reading from Kafka");
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
