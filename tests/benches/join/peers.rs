//! The systems cojoin is measured against, as commands: the bare consumer (this binary with
//! `--bare`, reading the data set's topics and doing nothing), the Python peers of host/benches/peers/ and
//! the Java peers (Kafka Streams, Flink).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cojoin_e2e::java_peer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{grace_ms, topics, window_ms, PARTITIONS};

/// The arguments every peer takes to find the data: the broker and the data set's topics, the
/// third (shipments) as `--third` when there is one.
pub(crate) fn data_args(bootstrap: &str) -> Vec<&str> {
    let mut args = vec!["--bootstrap", bootstrap];
    for (flag, topic) in ["--left", "--right", "--third"].into_iter().zip(topics()) {
        args.extend([flag, topic]);
    }
    args
}

/// A script of host/benches/peers/ run by `python`, pointed at the broker and the data set.
pub(crate) fn peer(python: &Path, peers: &Path, script: &str, bootstrap: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(peers.join(script)).args(data_args(bootstrap));
    cmd
}

/// The Kafka Streams peer joining the data set's topics into `bench-out` (two chained joins when
/// there are three) with `store` window stores ("rocksdb" or "memory").
pub(crate) fn kafka_streams(bootstrap: &str, store: &str) -> Command {
    let mut cmd = java_peer("kafka-streams", "KafkaStreamsJoin");
    cmd.args(data_args(bootstrap))
        .args(["--output-topic", "bench-out", "--store", store])
        .args(["--window-ms", &window_ms().to_string()])
        .args(["--grace-ms", &grace_ms().to_string()]);
    cmd
}

/// The Flink peer (an interval join on a local mini-cluster, two chained ones when there are three
/// topics) joining the data set's topics into `bench-out`, reading each topic to its end offsets
/// at the start and then ending.
pub(crate) fn flink(bootstrap: &str, group: &str) -> Command {
    let mut cmd = java_peer("flink", "FlinkJoin");
    cmd.args(data_args(bootstrap))
        .args(["--output-topic", "bench-out", "--bounded", "true"])
        .args(["--group", group])
        .args(["--window-ms", &window_ms().to_string()])
        .args(["--grace-ms", &grace_ms().to_string()]);
    cmd
}

/// The limit: read every partition of the data set's topics from the start, touching nothing.
pub(crate) fn bare(bootstrap: &str, expect: u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-bare")
        .set("enable.auto.commit", "false")
        // As cojoin's own consumer (host/src/kafka/client.rs): librdkafka's default backs a
        // partition's fetching off for 1 s whenever its local queue is full, and the bare
        // consumer's runs spread 315k-1.44M records/s, slower than cojoin itself (issue 31).
        .set("fetch.queue.backoff.ms", "20")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for topic in topics() {
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
    }
    consumer.assign(&tpl).unwrap();
    let (mut n, mut first) = (0u64, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while n < expect && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            m.expect("consuming");
            first.get_or_insert_with(Instant::now);
            n += 1;
        }
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    println!(
        "{}",
        serde_json::json!({"records": n, "matches": null, "seconds": seconds})
    );
}
