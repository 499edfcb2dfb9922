//! A tansu broker started as a separate process for one test, and the Kafka clients the tests
//! use around it (producer, reader). tansu keeps everything in memory: each test gets a fresh one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use crate::stream::Record;

/// The tansu binary: `$TANSU_BIN`, else `~/.cargo/bin/tansu` (where `make tansu` installs it).
pub fn tansu_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TANSU_BIN") {
        return path.into();
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let path = home.join("bin/tansu");
    assert!(
        path.exists(),
        "{path:?} is missing: run `make tansu` (cargo install tansu --locked --features dynostore)"
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Tansu {
    child: Child,
    pub bootstrap: String,
    url: String,
    pub log: PathBuf,
}

impl Tansu {
    /// Starts a broker on a free port with in-memory storage; returns once it answers metadata.
    pub fn start(dir: &std::path::Path) -> Tansu {
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let log = dir.join("tansu.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(tansu_bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("starting tansu");
        let tansu = Tansu {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            url,
            log,
        };
        tansu.wait_ready();
        tansu
    }

    fn wait_ready(&self) {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while consumer
            .fetch_metadata(None, Duration::from_secs(1))
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "tansu not answering after 30 s; see {:?}",
                self.log
            );
            std::thread::sleep(Duration::from_millis(100));
        }
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

    /// Creates `topic` with `partitions` partitions through tansu's own CLI.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let out = Command::new(tansu_bin())
            .args(["topic", "create", topic, "--broker", &self.url])
            .args(["--partitions", &partitions.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tansu topic create {topic}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn producer(&self, partitioner: &str) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_for(&self.bootstrap, partitioner)
    }

    /// A producer for the broker at `bootstrap`, for a thread that does not own the `Tansu`.
    ///
    /// One record per batch: tansu 0.6 answers a fetch from an offset inside a record batch with
    /// nothing (seen here: 10 records in one batch, a fetch from offset 5 returns none of 5..9),
    /// so a host restarting from a commit in the middle of a batch would never read the rest of
    /// it. Apache Kafka returns the batch and the client skips to the offset.
    pub fn producer_for(
        bootstrap: &str,
        partitioner: &str,
    ) -> ThreadedProducer<DefaultProducerContext> {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("partitioner", partitioner)
            .set("batch.num.messages", "1")
            .set("linger.ms", "0")
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

    /// [`Tansu::produce`] without the broker at hand.
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
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
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

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A record read back: key, value and headers as text.
#[derive(Clone, Debug)]
pub struct ReadRecord {
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
        let m = result.expect("reading from tansu");
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
            key: text(m.key()),
            value: text(m.payload()),
            headers,
        });
    }
}
