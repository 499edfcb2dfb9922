//! BENCH_VERIFY=1: after one system's one run, the output topic read back and checked against
//! the exact set of outcomes the generated data set calls for.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{join_kind, topics, PARTITIONS};

/// BENCH_VERIFY=1 (one system, one run): reads the output topic and checks that it holds exactly
/// the expected set — order `k-i` paid for even i, unpaid (left join) for odd i, each once; with
/// three topics every order shipped, once — as produce.py generates it with one key per record.
/// Panics with what differs.
pub(crate) fn verify_outputs(bootstrap: &str, records: u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-verify")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset("bench-out", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let left = join_kind() == "left";
    let three = topics().len() == 3;
    let want = if left || three {
        records
    } else {
        records.div_ceil(2)
    };
    let mut seen = std::collections::HashMap::<String, String>::new();
    let mut duplicates = 0u64;
    let mut idle = Instant::now();
    while seen.len() < want as usize || idle.elapsed() < Duration::from_secs(3) {
        if idle.elapsed() > Duration::from_secs(60) {
            break;
        }
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        idle = Instant::now();
        let m = m.expect("reading bench-out");
        let body: serde_json::Value =
            serde_json::from_slice(rdkafka::Message::payload(&m).unwrap()).unwrap();
        let id = body["order_id"].as_str().unwrap().to_owned();
        let status = body["status"].as_str().unwrap().to_owned();
        if seen.insert(id, status).is_some() {
            duplicates += 1;
        }
    }
    let mut wrong = Vec::new();
    for i in 0..records {
        let want = match (i % 2, left) {
            _ if three => Some("shipped"),
            (0, _) => Some("paid"),
            (_, true) => Some("unpaid"),
            (_, false) => None,
        };
        if seen.get(&format!("k-{i}")).map(String::as_str) != want {
            wrong.push(i);
        }
    }
    println!(
        "verify: {} distinct orders out, {duplicates} duplicates, {} of {records} orders not as expected (first: {:?})",
        seen.len(),
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(
        wrong.is_empty() && seen.len() as u64 == want,
        "the output set differs from the expected one"
    );
}
