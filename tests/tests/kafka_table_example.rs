//! The stream–table join of `examples/orders-customers` on Apache Kafka (issue 33): orders
//! enriched with their customer's row as of the order's timestamp, from a compacted `customers`
//! topic with several updates per key and deletions, by two `cojoin run` processes with the
//! example's config and Python plugin.
//!
//! Every order's output must name exactly the customer version a reference computes: the latest
//! update of its customer stamped at or before the order, `no-customer` when there is none or it
//! is a deletion. The orders are keyed by order id with the customer id in the value, so the
//! stream is repartitioned to the table's partition count. Then the topic is compacted under the
//! running hosts, one host leaves, and the other restores the tasks it takes over from the
//! compacted topic: the orders after that must find the customers' last rows all the same.
//!
//! Event time is decoupled from the wall clock (every timestamp is explicit, from a base half an
//! hour ago, inside `join.max_future` and the table's hour of history), so the outcome does not
//! depend on the machine's speed; no two records share a timestamp.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use cojoin_e2e::broker::{Kafka, ReadRecord};
use cojoin_e2e::hosts::{wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{post_mortem, run_dir, serial, start_hosts_with};
use cojoin_e2e::{plugin, root};

const TABLE_PARTITIONS: i32 = 3;
const ORDERS_PARTITIONS: i32 = 4;
/// Customers `c-0` to `c-11` have rows at some time; `c-12` and `c-13` never do.
const CUSTOMERS: u32 = 12;
const KEYS: u32 = 14;
/// Orders of the first phase (before the compaction and the handover), then of the second.
const FIRST: u32 = 120;
const SECOND: u32 = 42;
const GROUP: &str = "orders-customers-e2e";

/// One record of the `customers` table: a row (its version number) or a deletion.
#[derive(Clone, Debug)]
struct Update {
    customer: u32,
    ts: i64,
    version: Option<u32>,
}

/// The customers' history, `base` + seconds: customer k's update j at k·7 + j·60 s, for j in
/// 0..5 — k % 4 == 1 deleted at j = 2 and created again at j = 3; k % 4 == 2 deleted at j = 4;
/// k % 4 == 3 created only at j = 2.
fn first_updates(base: i64) -> Vec<Update> {
    let mut out = Vec::new();
    for j in 0..5 {
        for k in 0..CUSTOMERS {
            let version = match (k % 4, j) {
                (1, 2) | (2, 4) => None,
                (3, 0 | 1) => continue,
                _ => Some(j),
            };
            let ts = base + i64::from(k) * 7_000 + i64::from(j) * 60_000;
            out.push(Update {
                customer: k,
                ts,
                version,
            });
        }
    }
    out
}

/// After the first phase, at 700 + k s: customer k deleted when k % 3 == 1, else its version 5.
/// Every key gets one, so every partition's segment rolls and the cleaner can compact the rest.
fn second_updates(base: i64) -> Vec<Update> {
    (0..CUSTOMERS)
        .map(|k| Update {
            customer: k,
            ts: base + 700_000 + i64::from(k) * 1_000,
            version: (k % 3 != 1).then_some(5),
        })
        .collect()
}

/// Order i of customer `c-{i % 14}`: the first phase 5 s apart from 1.234 s (up to 600 s, between
/// the updates), the second 1 s apart from 720.234 s (after every update).
fn order_ts(base: i64, i: u32) -> i64 {
    match i < FIRST {
        true => base + i64::from(i) * 5_000 + 1_234,
        false => base + 720_000 + i64::from(i - FIRST) * 1_000 + 234,
    }
}

/// The reference: the row order `i` must be enriched with, as (update timestamp, version), or
/// `None` for `no-customer`.
fn expected_row(updates: &[Update], base: i64, i: u32) -> Option<(i64, u32)> {
    let ts = order_ts(base, i);
    let latest = updates
        .iter()
        .filter(|u| u.customer == i % KEYS && u.ts <= ts)
        .max_by_key(|u| u.ts)?;
    latest.version.map(|v| (latest.ts, v))
}

fn produce_updates(producer: &ThreadedProducer<DefaultProducerContext>, updates: &[Update]) {
    for u in updates {
        let key = format!("c-{}", u.customer);
        let value = u.version.map(|v| {
            format!(
                r#"{{"customer_id":"{key}","name":"customer {}","version":{v}}}"#,
                u.customer
            )
        });
        let mut record = BaseRecord::to("customers").key(&key).timestamp(u.ts);
        if let Some(value) = &value {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn produce_orders(
    producer: &ThreadedProducer<DefaultProducerContext>,
    base: i64,
    from: u32,
    to: u32,
) {
    for i in from..to {
        let key = format!("order-{i}");
        let value = format!(
            r#"{{"order_id":"{key}","customer_id":"c-{}","amount":{}}}"#,
            i % KEYS,
            10 + i % 90
        );
        let record = BaseRecord::to("orders")
            .key(&key)
            .payload(&value)
            .timestamp(order_ts(base, i));
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// An output as the plugin writes it: (status, customer_version_ts, customer.version).
type Outcome = (String, Option<i64>, Option<u64>);

fn outcomes(records: &[ReadRecord]) -> BTreeMap<String, Vec<Outcome>> {
    let mut out: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    for r in records {
        let body: serde_json::Value = serde_json::from_str(&r.value)
            .unwrap_or_else(|e| panic!("output {:?} is not JSON: {e}", r.value));
        let order_id = body["order_id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(r.key, order_id, "an output is keyed by its order id");
        out.entry(order_id).or_default().push((
            body["status"].as_str().unwrap_or_default().to_owned(),
            body["customer_version_ts"].as_i64(),
            body["customer"]["version"].as_u64(),
        ));
    }
    out
}

/// Every order of `from..to` reported once, with the reference's row; the differences named.
fn check(
    got: &BTreeMap<String, Vec<Outcome>>,
    updates: &[Update],
    base: i64,
    from: u32,
    to: u32,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for i in from..to {
        let order = format!("order-{i}");
        let want: Outcome = match expected_row(updates, base, i) {
            Some((ts, v)) => ("enriched".into(), Some(ts), Some(u64::from(v))),
            None => ("no-customer".into(), None, None),
        };
        match got.get(&order).map(Vec::as_slice) {
            Some([one]) if *one == want => {}
            other => wrong.push(format!("{order}: want {want:?}, got {other:?}")),
        }
    }
    wrong
}

/// The records the restore of task `p`'s table partition read, per restore `host` logged.
fn restores(host: &HostProcess, p: i32) -> Vec<u64> {
    let needle = format!("table customers-{p} restored: ");
    host.log_text()
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find(&needle)? + needle.len()..];
            rest.split(' ').next()?.parse().ok()
        })
        .collect()
}

/// The example's config for this broker: its bootstrap and group, the built plugin, a free
/// admin port, and the dead-letter topic the post-mortem reads.
fn example_config(kafka: &Kafka) -> String {
    let example = root().join("examples/orders-customers/cojoin.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let wasm = plugin("order_enriched_python.wasm");
    let mut config = text;
    for (from, to) in [
        (
            "bootstrap_servers = \"localhost:9092\"",
            format!("bootstrap_servers = \"{}\"", kafka.bootstrap),
        ),
        (
            "group_id = \"orders-customers\"",
            format!("group_id = \"{GROUP}\""),
        ),
        (
            "path = \"../../build/plugins/order_enriched_python.wasm\"",
            format!("path = \"{}\"", wasm.display()),
        ),
        ("bind = \"127.0.0.1:9464\"", "bind = \"127.0.0.1:0\"".into()),
        (
            "dead_letter_topic = \"orders-customers-dlq\"",
            "dead_letter_topic = \"dlq\"".into(),
        ),
    ] {
        assert!(config.contains(from), "{example:?} no longer says {from}");
        config = config.replace(from, &to);
    }
    config
}

#[test]
fn orders_are_enriched_with_the_customer_as_of_their_time_through_compaction_and_a_handover() {
    let _serial = serial();
    let t = Instant::now();
    let dir = run_dir("orders_customers_table_join");
    // The cleaner looks for dirty logs every 250 ms (15 s by default).
    let kafka = Kafka::start_with(&dir, "log.cleaner.backoff.ms=250");
    kafka.create_topic_with(
        "customers",
        TABLE_PARTITIONS,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "100"),
        ],
    );
    kafka.create_topic("orders", ORDERS_PARTITIONS);
    kafka.create_topic("orders-enriched", 1);
    kafka.create_topic("dlq", 1);

    let mut hosts = start_hosts_with(&dir, 2, &example_config(&kafka));
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        TABLE_PARTITIONS,
        Duration::from_secs(60),
    );
    eprintln!("group of 2 stable after {:?}", t.elapsed());

    // Whole seconds, half an hour ago: the base the timestamps count from.
    let base = (now_ms() - 30 * 60_000) / 1_000 * 1_000;
    let mut updates = first_updates(base);
    let producer = kafka.producer("murmur2_random");
    // The table first: an order's updates are on the broker before it, as the task waits for
    // a partition with unread records, never for records not yet written.
    produce_updates(&producer, &updates);
    produce_orders(&producer, base, 0, FIRST);
    let mut reader = kafka.reader("orders-enriched", 1);
    let done = |n: u32| move |r: &[ReadRecord]| outcomes(r).len() >= n as usize;
    if !reader.read_while_not(Duration::from_secs(60), done(FIRST)) {
        panic!(
            "{} of {FIRST} orders reported in 60 s\n{}",
            outcomes(&reader.records).len(),
            post_mortem(&kafka, &hosts)
        );
    }
    let wrong = check(&outcomes(&reader.records), &updates, base, 0, FIRST);
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}\n{}",
        wrong.len(),
        wrong.join("\n"),
        post_mortem(&kafka, &hosts)
    );
    let enriched = (0..FIRST)
        .filter(|&i| expected_row(&updates, base, i).is_some())
        .count();
    eprintln!(
        "first phase: {FIRST} orders, {enriched} enriched, {} without a customer ({:?})",
        FIRST as usize - enriched,
        t.elapsed()
    );

    // A second burst of updates rolls every partition's segment; the cleaner then compacts the
    // first phase's history away.
    let second = second_updates(base);
    produce_updates(&producer, &second);
    updates.extend(second);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ends = kafka.end_offsets("customers", TABLE_PARTITIONS);
    let held = loop {
        let held = kafka.records_held("customers", TABLE_PARTITIONS);
        if held.iter().zip(&ends).all(|(&h, &e)| (h as i64) < e) {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "customers not compacted in 30 s: {held:?} records held of {ends:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "customers compacted: {held:?} records held of {ends:?} written ({:?})",
        t.elapsed()
    );

    // host-1 leaves: host-0 takes its tasks over and restores their tables from the compacted
    // topic; the second phase's orders then need the customers' last rows.
    let moved = hosts[1].assignments().pop().expect("host-1 held tasks").0;
    hosts[1].terminate();
    let (status, _) = hosts[1].wait_exit(Duration::from_secs(30));
    assert!(status.success(), "host-1 exited with {status}");
    produce_orders(&producer, base, FIRST, FIRST + SECOND);
    if !reader.read_while_not(Duration::from_secs(60), done(FIRST + SECOND)) {
        panic!(
            "{} of {} orders reported in 60 s\n{}",
            outcomes(&reader.records).len(),
            FIRST + SECOND,
            post_mortem(&kafka, &hosts)
        );
    }
    // Duplicates, if any, come within a moment.
    let got = outcomes(reader.read_for(Duration::from_secs(2)));
    let wrong = check(&got, &updates, base, 0, FIRST + SECOND);
    assert!(
        wrong.is_empty() && got.len() == (FIRST + SECOND) as usize,
        "{} wrong of {} orders reported:\n{}\n{}",
        wrong.len(),
        got.len(),
        wrong.join("\n"),
        post_mortem(&kafka, &hosts)
    );
    for &p in &moved {
        let read = restores(&hosts[0], p);
        let last = read.last().copied();
        assert!(
            last.is_some_and(|n| n > 0 && (n as i64) < ends[p as usize]),
            "host-0 restored customers-{p} (taken over from host-1) reading {read:?} records, not the compacted topic ({} written, {} held)",
            ends[p as usize],
            held[p as usize]
        );
        eprintln!(
            "host-0 restored customers-{p}: {last:?} records read of {} written",
            ends[p as usize]
        );
    }
    eprintln!(
        "{} orders, each with its customer as of its time ({:?})",
        FIRST + SECOND,
        t.elapsed()
    );
}

/// The wall clock, Unix ms.
fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap().as_millis() as i64
}
