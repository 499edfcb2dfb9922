//! BENCH_VERIFY=1: after one system's one run, the output topic read back and checked against
//! the exact set of outcomes the generated data set calls for.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{data_set, join_kind, topics, DataSet, PARTITIONS};

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
    if data_set() == DataSet::Table {
        return verify_table(&consumer, records);
    }
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

/// The stream-table data set: every order out exactly once, with its own customer's row as of its
/// timestamp: version 2 for the tenth of customers updated before the orders (ids divisible by
/// 10), version 1 for the others (produce.py `--table`).
fn verify_table(consumer: &BaseConsumer, records: u64) {
    let mut seen = std::collections::HashSet::<u64>::new();
    let (mut duplicates, mut wrong_row, mut first_wrong) = (0u64, 0u64, None);
    let mut idle = Instant::now();
    while (seen.len() as u64) < records || idle.elapsed() < Duration::from_secs(3) {
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
        let order = body["order"]["id"].as_u64().unwrap();
        if !seen.insert(order) {
            duplicates += 1;
        }
        let customer = &body["payment"];
        let id = customer["id"].as_u64().unwrap_or(u64::MAX);
        let want_version = if id.is_multiple_of(10) { 2 } else { 1 };
        if body["order_id"].as_str() != Some(&format!("c-{id}"))
            || customer["version"].as_u64() != Some(want_version)
        {
            wrong_row += 1;
            first_wrong.get_or_insert(body);
        }
    }
    let missing = (0..records).filter(|i| !seen.contains(i)).count();
    println!(
        "verify: {} distinct orders out, {duplicates} duplicates, {missing} of {records} missing, \
         {wrong_row} with another row than their customer's as of their time (first: {first_wrong:?})",
        seen.len()
    );
    assert!(
        missing == 0 && duplicates == 0 && wrong_row == 0,
        "the output set differs from the expected one"
    );
}
