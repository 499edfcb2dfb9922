//! Compression both ways (issue 28): inputs written by Apache Kafka's Java producer
//! (tests/kafka/Produce.java) with each codec Kafka has are joined, and the batches cojoin writes
//! carry the codec of its `output.compression`, as the broker's own `DumpLogSegments` reads them
//! from its log directory. One broker for all four codecs, each with its own topics, group and
//! host; one of them re-keys its payments through an internal topic, whose batches are checked too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{run_dir, serial, tally_once_complete, PARTITIONS};
use cojoin_e2e::stream::{self, Record};
use cojoin_e2e::{plugin, root};

const ORDERS: u32 = 600;
/// How long a JVM may take: a cold start on two busy cores, and for `Produce.java` its
/// compilation by the source launcher (about 3 s alone).
const JAVA_TIMEOUT: Duration = Duration::from_secs(90);

/// One codec's join: the inputs' codec, the host's `output.compression` (`None`: left out, so the
/// default), and the payments topic's partition count (not 6: re-keyed through an internal topic).
struct Case {
    input: &'static str,
    output: Option<&'static str>,
    payments_partitions: i32,
}

const CASES: [Case; 4] = [
    Case {
        input: "gzip",
        output: Some("zstd"),
        payments_partitions: PARTITIONS,
    },
    Case {
        input: "snappy",
        output: Some("lz4"),
        payments_partitions: PARTITIONS,
    },
    Case {
        input: "lz4",
        output: Some("gzip"),
        payments_partitions: 4,
    },
    Case {
        input: "zstd",
        output: None,
        payments_partitions: PARTITIONS,
    },
];

impl Case {
    fn topic(&self, name: &str) -> String {
        format!("{name}-{}", self.input)
    }

    fn group(&self) -> String {
        format!("codecs-{}", self.input)
    }

    /// What `DumpLogSegments` prints for the batches the host writes.
    fn output_codec(&self) -> &'static str {
        self.output.unwrap_or("none")
    }

    /// The left join of the suites on this case's topics, compressing as the case says.
    fn config(&self, kafka: &Kafka) -> String {
        let compression = self
            .output
            .map(|c| format!("\ncompression = \"{c}\""))
            .unwrap_or_default();
        join_config(
            &kafka.bootstrap,
            &self.group(),
            &plugin("order_paid_rust.wasm"),
            "left",
        )
        .replace(
            "left = \"orders\"",
            &format!("left = {:?}", self.topic("orders")),
        )
        .replace(
            "right = \"payments\"",
            &format!("right = {:?}", self.topic("payments")),
        )
        .replace(
            "topic = \"orders-paid\"",
            &format!("topic = {:?}", self.topic("out")),
        )
        .replace(
            "dead_letter_topic = \"dlq\"",
            &format!("dead_letter_topic = {:?}{compression}", self.topic("dlq")),
        )
    }

    /// The stream on this case's topics, then (after a flush, so that no tick overtakes a record)
    /// payments far ahead in event time under 100 keys, which reach every partition of the join
    /// and close every window: `Produce.java`'s input, partitioned by its murmur2.
    fn producer_input(&self) -> String {
        let line = |r: &Record| {
            format!(
                "{}\t-1\t{}\t{}\t{}\n",
                self.topic(r.topic),
                r.timestamp,
                r.key,
                r.value
            )
        };
        let ticks = (0..100).map(|k| Record {
            topic: "payments",
            key: format!("tick-{k}"),
            value: format!("{{\"order_id\":\"tick-{k}\"}}"),
            timestamp: stream::BASE_TS + 10_000_000,
        });
        let mut text: String = stream::orders(0, ORDERS).iter().map(line).collect();
        text.push('\n');
        text.extend(ticks.map(|r| line(&r)));
        text
    }
}

#[test]
fn inputs_in_every_codec_are_joined_and_outputs_are_compressed_as_configured() {
    let _serial = serial();
    let t = Instant::now();
    let dir = run_dir("inputs_in_every_codec_are_joined_and_outputs_are_compressed_as_configured");
    let kafka = Kafka::start(&dir);
    for case in &CASES {
        kafka.create_topic(&case.topic("orders"), PARTITIONS);
        kafka.create_topic(&case.topic("payments"), case.payments_partitions);
        kafka.create_topic(&case.topic("out"), 1);
        kafka.create_topic(&case.topic("dlq"), 1);
    }
    let hosts: Vec<HostProcess> = CASES
        .iter()
        .map(|case| HostProcess::start(&dir, &case.group(), &case.config(&kafka)))
        .collect();
    for host in &hosts {
        wait_for_stable_group(&[host], PARTITIONS, Duration::from_secs(90));
    }
    eprintln!("4 hosts stable after {:?}", t.elapsed());

    // The four producers at once: each JVM spends most of its time starting.
    let producers: Vec<_> = CASES
        .iter()
        .map(|case| {
            let input = dir.join(format!("records-{}.tsv", case.input));
            std::fs::write(&input, case.producer_input()).unwrap();
            let log = dir.join(format!("produce-{}.log", case.input));
            let producer = java(
                &[
                    root().join("tests/kafka/Produce.java").as_os_str(),
                    kafka.bootstrap.as_ref(),
                    case.input.as_ref(),
                ],
                Some(&input),
                &log,
            );
            (case.input, producer, log)
        })
        .collect();
    for (codec, producer, log) in producers {
        let said = finish(&format!("Produce.java with {codec}"), producer, &log);
        eprintln!("{codec}: {}", said.trim());
    }
    eprintln!("inputs produced after {:?}", t.elapsed());

    let expected = stream::expected(ORDERS);
    for (case, host) in CASES.iter().zip(&hosts) {
        let mut reader = kafka.reader(&case.topic("out"), 1);
        let tally = tally_once_complete(
            &mut reader,
            &expected,
            Duration::from_secs(120),
            Duration::from_secs(1),
        );
        eprintln!(
            "{} in, {} out: matches {}, expiries {}, outputs {}, duplicates {} ({:?})",
            case.input,
            case.output_codec(),
            tally.matches,
            tally.expiries,
            tally.outputs,
            tally.duplicates,
            t.elapsed()
        );
        assert!(
            tally.complete(),
            "{} inputs: {tally:?}\ndead letters: {:?}\n{}",
            case.input,
            dead_letters(&kafka, case),
            host.log_text()
        );
        assert_eq!((tally.matches, tally.expiries), (450, 150), "{tally:?}");
        assert_eq!(tally.duplicates, 0, "{tally:?}");
    }

    for case in &CASES {
        let mut logs = vec![(case.topic("orders"), case.input)];
        logs.push((case.topic("out"), case.output_codec()));
        if case.payments_partitions != PARTITIONS {
            let internal = format!("{}-{}-repartition", case.group(), case.topic("payments"));
            logs.push((internal, case.output_codec()));
        }
        for (topic, want) in logs {
            let codecs = batch_codecs(&dir, &kafka.partition_dir(&topic, 0));
            assert!(
                !codecs.is_empty() && codecs.iter().all(|c| c == want),
                "{topic}: batches compressed with {codecs:?}, expected {want} only"
            );
            eprintln!("{topic}: {} batches, all {want}", codecs.len());
        }
    }
    eprintln!("done after {:?}", t.elapsed());
}

/// `make kafka-libs`' jars, as `tests/kafka/broker.sh` finds them.
fn kafka_libs() -> PathBuf {
    std::env::var_os("KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("tests/kafka/target/kafka-libs"))
}

/// A JVM with the broker's jars running `args`, stdin from `input` (else none), stdout and
/// stderr to `log`.
fn java(args: &[&std::ffi::OsStr], input: Option<&Path>, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let stdin = input.map_or_else(Stdio::null, |p| {
        Stdio::from(std::fs::File::open(p).unwrap())
    });
    Command::new("java")
        .arg("-Xmx256m")
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            root().join("tests/kafka/log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(kafka_libs().join("*"))
        .args(args)
        .stdin(stdin)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("starting java (Kafka 4.4's tools need Java 17 or newer on PATH)")
}

/// Waits for a [`java`] process; its log. Panics with `what` and the log if it fails or takes
/// longer than [`JAVA_TIMEOUT`].
fn finish(what: &str, mut child: Child, log: &Path) -> String {
    let deadline = Instant::now() + JAVA_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {JAVA_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "{what} failed ({status}):\n{text}");
    text
}

/// The codec of each batch in the first segment of a partition directory, as Kafka's
/// `DumpLogSegments` prints it (`compresscodec: zstd`).
fn batch_codecs(dir: &Path, partition: &Path) -> Vec<String> {
    let segment = partition.join("00000000000000000000.log");
    let log = dir.join(format!(
        "dump-{}.log",
        partition.file_name().unwrap().to_string_lossy()
    ));
    let child = java(
        &[
            "org.apache.kafka.tools.DumpLogSegments".as_ref(),
            "--files".as_ref(),
            segment.as_os_str(),
        ],
        None,
        &log,
    );
    finish(&format!("DumpLogSegments of {segment:?}"), child, &log)
        .lines()
        .filter_map(|l| l.split("compresscodec: ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

/// The dead letters of `case` with their kind, for a failure message.
fn dead_letters(kafka: &Kafka, case: &Case) -> Vec<String> {
    kafka
        .reader(&case.topic("dlq"), 1)
        .read_for(Duration::from_secs(2))
        .iter()
        .map(|r| {
            format!(
                "{} ({})",
                r.key,
                r.header("cojoin.error.kind").unwrap_or("?")
            )
        })
        .collect()
}
