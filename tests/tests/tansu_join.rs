//! cojoin on a real Kafka-compatible broker: tansu as a separate process, several `cojoin run`
//! processes in one consumer group, kill -9 and restart, partition-count and partitioner problems,
//! dead letters from a trapping plugin. Each test starts its own in-memory tansu.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cojoin_e2e::broker::{ReadRecord, Tansu};
use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
use cojoin_e2e::stream::{self, Record, Tally};
use cojoin_e2e::{cojoin, plugin};

const PARTITIONS: i32 = 6;
const ORDERS: u32 = 600;

/// The tests share two cores: one broker and its hosts at a time keeps the timings sane.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh directory per test under target/e2e-runs/, kept afterwards: broker and host logs for
/// a failure's post-mortem.
fn run_dir(test: &str) -> std::path::PathBuf {
    let dir = cojoin_e2e::root().join("target/e2e-runs").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    eprintln!("logs in {dir:?}");
    dir
}

fn join_broker(dir: &std::path::Path) -> Tansu {
    let tansu = Tansu::start(dir);
    tansu.create_topic("orders", PARTITIONS);
    tansu.create_topic("payments", PARTITIONS);
    tansu.create_topic("orders-paid", 1);
    tansu.create_topic("dlq", 1);
    tansu
}

/// One payment per partition far ahead in event time: stream time passes every window, so the
/// unpaid orders expire.
fn ticks() -> Vec<(Record, i32)> {
    (0..PARTITIONS)
        .map(|p| {
            let r = Record {
                topic: "payments",
                key: format!("tick-{p}"),
                value: "{}".into(),
                timestamp: stream::BASE_TS + 10_000_000,
            };
            (r, p)
        })
        .collect()
}

fn order_outputs(records: &[ReadRecord]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.value)
                .unwrap_or_else(|e| panic!("output {:?} is not JSON: {e}", r.value));
            (
                body["order_id"].as_str().unwrap_or_default().to_owned(),
                body["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `n` hosts; with `static_members` each has `kafka.instance_id` = its name.
fn start_hosts(
    dir: &std::path::Path,
    tansu: &Tansu,
    group: &str,
    n: usize,
    static_members: bool,
) -> Vec<HostProcess> {
    let config = join_config(&tansu.bootstrap, group, &plugin("order_paid_rust.wasm"), "left");
    (0..n)
        .map(|i| {
            let name = format!("host-{i}");
            let config = if static_members {
                config.replace("[kafka]\n", &format!("[kafka]\ninstance_id = \"{name}\"\n"))
            } else {
                config.clone()
            };
            HostProcess::start(dir, &name, &config)
        })
        .collect()
}

/// Every host's every assignment held the same partition numbers of both topics.
fn assert_co_partitioned(hosts: &[HostProcess]) {
    for h in hosts {
        let assignments = h.assignments();
        assert!(!assignments.is_empty(), "{} logged no assignment:\n{}", h.name, h.log_text());
        for (left, right) in &assignments {
            assert_eq!(left, right, "{}: orders {left:?} vs payments {right:?}", h.name);
        }
        eprintln!("{}: assignments {assignments:?}", h.name);
    }
}

/// Reads outputs until every expected outcome is there (or 120 s pass), then 3 s more for
/// stragglers; the tally, which names what is missing if anything is.
fn read_all_outcomes(tansu: &Tansu, expected: &std::collections::BTreeMap<String, &'static str>) -> Tally {
    let mut reader = tansu.reader("orders-paid", 1);
    reader.read_while_not(Duration::from_secs(120), |r| {
        Tally::of(expected, &order_outputs(r)).missing.is_empty()
    });
    let records = reader.read_for(Duration::from_secs(3));
    Tally::of(expected, &order_outputs(records))
}

#[test]
fn three_hosts_produce_exactly_the_expected_matches_and_expiries() {
    let _serial = serial();
    let dir = run_dir("three_hosts_produce_exactly_the_expected_matches_and_expiries");
    let tansu = join_broker(&dir);
    let hosts = start_hosts(&dir, &tansu, "three-hosts", 3, false);
    let t = Instant::now();
    wait_for_stable_group(&hosts.iter().collect::<Vec<_>>(), PARTITIONS, Duration::from_secs(90));
    eprintln!("group of 3 stable after {:?}", t.elapsed());

    let producer = tansu.producer("murmur2_random");
    tansu.produce(&producer, &stream::orders(0, ORDERS), None);
    for (tick, p) in ticks() {
        tansu.produce(&producer, &[tick], Some(p));
    }
    let tally = read_all_outcomes(&tansu, &stream::expected(ORDERS));
    eprintln!(
        "events {}, matches {}, expiries {}, outputs {}, duplicates {} ({:?} after the group formed)",
        stream::orders(0, ORDERS).len(),
        tally.matches,
        tally.expiries,
        tally.outputs,
        tally.duplicates,
        t.elapsed()
    );
    assert!(tally.complete(), "{tally:?}");
    assert_eq!((tally.matches, tally.expiries), (450, 150));
    // No host left or joined while records flowed: nothing was replayed.
    assert_eq!(tally.duplicates, 0, "{tally:?}");
    assert_co_partitioned(&hosts);
}

#[test]
fn a_host_killed_mid_stream_and_restarted_loses_no_match_or_expiry() {
    let _serial = serial();
    let dir = run_dir("a_host_killed_mid_stream_and_restarted_loses_no_match_or_expiry");
    let tansu = join_broker(&dir);
    // Restarted at once, as a supervisor would: tansu 0.6 does not move a dead member's
    // partitions to the survivors by itself (seen here: after the missed heartbeat one survivor
    // was reassigned, the other never rebalanced, two tasks sat unowned), and static membership
    // (kafka.instance_id) on it rebalances without end; a new member joining does rebalance all.
    let mut hosts = start_hosts(&dir, &tansu, "kill-9", 3, false);
    let t = Instant::now();
    wait_for_stable_group(&hosts.iter().collect::<Vec<_>>(), PARTITIONS, Duration::from_secs(90));

    let producer = tansu.producer("murmur2_random");
    tansu.produce(&producer, &stream::orders(0, ORDERS / 2), None);
    // Mid-stream: part of the first half is out, so every host has processed and committed some.
    let mut reader = tansu.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 100);
    hosts[0].kill9();
    eprintln!("host-0 killed after {:?}, {} outputs out", t.elapsed(), reader.records.len());

    tansu.produce(&producer, &stream::orders(ORDERS / 2, ORDERS), None);
    hosts[0].restart(&dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    while hosts[0].assignments().len() < 2 {
        assert!(Instant::now() < deadline, "restarted host-0 got no assignment:\n{}", hosts[0].log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for_stable_group(&hosts.iter().collect::<Vec<_>>(), PARTITIONS, Duration::from_secs(60));
    eprintln!("host-0 back with its tasks after {:?}", t.elapsed());
    for (tick, p) in ticks() {
        tansu.produce(&producer, &[tick], Some(p));
    }

    let tally = read_all_outcomes(&tansu, &stream::expected(ORDERS));
    eprintln!(
        "kill -9 + restart: events {}, matches {}, expiries {}, outputs {}, duplicates {} ({:?})",
        stream::orders(0, ORDERS).len(),
        tally.matches,
        tally.expiries,
        tally.outputs,
        tally.duplicates,
        t.elapsed()
    );
    assert!(tally.complete(), "{tally:?}");
    assert_eq!((tally.matches, tally.expiries), (450, 150));
    assert_co_partitioned(&hosts);
}

#[test]
fn topics_with_different_partition_counts_are_refused_by_run_and_check() {
    let _serial = serial();
    let dir = run_dir("topics_with_different_partition_counts_are_refused_by_run_and_check");
    let tansu = Tansu::start(&dir);
    tansu.create_topic("orders", 6);
    tansu.create_topic("payments", 4);
    let config = join_config(&tansu.bootstrap, "unequal", &plugin("order_paid_rust.wasm"), "left");
    let mut host = HostProcess::start(&dir, "host", &config);
    let (status, log) = host.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "run must refuse: {log}");
    assert!(
        log.contains("topics not co-partitioned: orders has 6 partitions, payments has 4"),
        "{log}"
    );

    let config_path = dir.join("host.toml");
    let out = cojoin(&["check", "--config", config_path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("PROBLEM: topics not co-partitioned: orders has 6 partitions, payments has 4"),
        "{stdout}"
    );
}

#[test]
fn check_reports_keys_that_producers_partitioned_differently() {
    let _serial = serial();
    let dir = run_dir("check_reports_keys_that_producers_partitioned_differently");
    let tansu = join_broker(&dir);
    let config = join_config(&tansu.bootstrap, "check", &plugin("order_paid_rust.wasm"), "left");
    let config_path = dir.join("check.toml");
    std::fs::write(&config_path, &config).unwrap();
    let records = stream::orders(0, 200);
    let (orders, payments): (Vec<Record>, Vec<Record>) =
        records.into_iter().partition(|r| r.topic == "orders");

    // Payments from librdkafka's default partitioner (CRC32), orders from a Java-compatible one.
    tansu.produce(&tansu.producer("murmur2_random"), &orders, None);
    tansu.produce(&tansu.producer("consistent_random"), &payments, None);
    let out = cojoin(&["check", "--config", config_path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("different partition numbers"), "{stdout}");
    assert!(stdout.contains("orders: 200 keys sampled, partitioned by murmur2"), "{stdout}");
    assert!(stdout.contains("payments: 150 keys sampled, partitioned by CRC32"), "{stdout}");
}

#[test]
fn inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced() {
    let _serial = serial();
    let dir = run_dir("inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced");
    let tansu = join_broker(&dir);
    // The misbehave fixture panics (a trap) on keys starting with "panic", answers "ok <key>" else.
    let config = join_config(&tansu.bootstrap, "dlq", &plugin("misbehave.wasm"), "inner");
    let host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));

    let mut records = Vec::new();
    for i in 0..60 {
        let key = if i % 10 == 3 { format!("panic-{i}") } else { format!("ok-{i}") };
        let ts = stream::BASE_TS + i * 1000;
        for (topic, dt) in [("orders", 0), ("payments", 500)] {
            records.push(Record { topic, key: key.clone(), value: format!("{{\"i\":{i}}}"), timestamp: ts + dt });
        }
    }
    tansu.produce(&tansu.producer("murmur2_random"), &records, None);

    let mut outputs = tansu.reader("orders-paid", 1);
    let outputs = outputs.read_until("54 matches produced", Duration::from_secs(60), |r| r.len() >= 54);
    let mut dlq = tansu.reader("dlq", 1);
    // Each failed match dead-letters both of its inputs.
    let dead = dlq.read_until("12 dead letters", Duration::from_secs(60), |r| r.len() >= 12).to_vec();

    let mut produced: Vec<&str> = outputs.iter().map(|r| r.value.as_str()).collect();
    produced.sort_unstable();
    produced.dedup();
    assert_eq!(produced.len(), 54, "{produced:?}");
    assert!(produced.iter().all(|v| v.starts_with("ok ok-")), "{produced:?}");

    let mut dead_keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
    dead_keys.sort_unstable();
    dead_keys.dedup();
    assert_eq!(dead_keys, ["panic-13", "panic-23", "panic-3", "panic-33", "panic-43", "panic-53"]);
    for r in &dead {
        assert_eq!(r.header("cojoin.error.kind"), Some("crash"), "{r:?}");
        assert!(r.header("cojoin.error.message").is_some_and(|m| m.contains("wasm trap")), "{r:?}");
        assert!(r.header("cojoin.plugin.version").is_some_and(|v| v.starts_with("misbehave@")), "{r:?}");
        let topic = r.header("cojoin.source.topic").unwrap();
        assert!(topic == "orders" || topic == "payments", "{r:?}");
        assert!(r.header("cojoin.source.partition").unwrap().parse::<i32>().is_ok(), "{r:?}");
        assert!(r.header("cojoin.source.offset").unwrap().parse::<i64>().is_ok(), "{r:?}");
    }
    eprintln!("dead letters: {} records for keys {dead_keys:?}", dead.len());
}

