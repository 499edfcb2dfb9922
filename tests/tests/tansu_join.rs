//! cojoin on a real Kafka-compatible broker: tansu as a separate process, several `cojoin run`
//! processes in one consumer group, kill -9 and restart, partition-count and partitioner problems,
//! dead letters from a trapping plugin. Each test starts its own in-memory tansu.

use std::time::{Duration, Instant};

use cojoin_e2e::broker::Tansu;
use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{
    assert_co_partitioned, join_broker, post_mortem, read_all_outcomes, run_dir, serial,
    start_hosts, ticks, PARTITIONS,
};
use cojoin_e2e::stream::{self, Record};
use cojoin_e2e::{cojoin, plugin};

const ORDERS: u32 = 600;

#[test]
fn three_hosts_produce_exactly_the_expected_matches_and_expiries() {
    let _serial = serial();
    let dir = run_dir("three_hosts_produce_exactly_the_expected_matches_and_expiries");
    let tansu = join_broker(&dir);
    let hosts = start_hosts(&dir, &tansu, "three-hosts", 3);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
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

/// `n` hosts, the stream's first half, kill -9 of host-0 once 100 outputs are out, the second
/// half, host-0 restarted after `down`, then every outcome checked: none lost, duplicates counted.
fn kill_mid_stream_and_restart(test: &str, n: usize, down: Duration) {
    let _serial = serial();
    let dir = run_dir(test);
    let tansu = join_broker(&dir);
    let mut hosts = start_hosts(&dir, &tansu, test, n);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );

    let producer = tansu.producer("murmur2_random");
    tansu.produce(&producer, &stream::orders(0, ORDERS / 2), None);
    // Mid-stream: part of the first half is out, so every host has processed and committed some.
    let mut reader = tansu.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 100);
    hosts[0].kill9();
    eprintln!(
        "host-0 killed after {:?}, {} outputs out",
        t.elapsed(),
        reader.records.len()
    );

    tansu.produce(&producer, &stream::orders(ORDERS / 2, ORDERS), None);
    std::thread::sleep(down);
    hosts[0].restart(&dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    while hosts[0].assignments().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "restarted host-0 got no assignment:\n{}",
            hosts[0].log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(60),
    );
    eprintln!("host-0 back with its tasks after {:?}", t.elapsed());
    for (tick, p) in ticks() {
        tansu.produce(&producer, &[tick], Some(p));
    }

    let tally = read_all_outcomes(&tansu, &stream::expected(ORDERS));
    eprintln!(
        "{n} host(s), kill -9 + restart: events {}, matches {}, expiries {}, outputs {}, duplicates {} ({:?})",
        stream::orders(0, ORDERS).len(),
        tally.matches,
        tally.expiries,
        tally.outputs,
        tally.duplicates,
        t.elapsed()
    );
    assert!(
        tally.complete(),
        "{tally:?}\n{}",
        post_mortem(&tansu, &hosts)
    );
    assert_eq!((tally.matches, tally.expiries), (450, 150));
    assert_co_partitioned(&hosts);
}

/// One host: the restarted process must rebuild every task from the commits the killed one left.
/// It comes back after the session timeout (6 s), so the broker has dropped the dead member.
#[test]
fn the_only_host_killed_mid_stream_and_restarted_loses_no_match_or_expiry() {
    kill_mid_stream_and_restart("kill-9-one-host", 1, Duration::from_secs(7));
}

/// Three hosts, host-0 killed and restarted by a supervisor once its session has timed out.
/// The restart waits out the session timeout (6 s) because of how tansu 0.6's group coordinator
/// works (read in tansu-broker 0.6.0, src/coordinator/group/administrator.rs): it drops a member
/// whose session timed out only while handling another request, and then does not rebalance the
/// survivors, so the dead member's tasks stay unowned until membership changes; a member joining
/// before the timeout is handed partitions next to the dead one. A new member joining after it
/// makes tansu rebalance the whole group. Apache Kafka reassigns after the timeout on its own.
#[test]
fn one_of_three_hosts_killed_mid_stream_and_restarted_loses_no_match_or_expiry() {
    kill_mid_stream_and_restart("kill-9-three-hosts", 3, Duration::from_secs(7));
}

#[test]
fn topics_with_different_partition_counts_are_refused_by_run_and_check() {
    let _serial = serial();
    let dir = run_dir("topics_with_different_partition_counts_are_refused_by_run_and_check");
    let tansu = Tansu::start(&dir);
    tansu.create_topic("orders", 6);
    tansu.create_topic("payments", 4);
    let config = join_config(
        &tansu.bootstrap,
        "unequal",
        &plugin("order_paid_rust.wasm"),
        "left",
    );
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
        stdout.contains(
            "PROBLEM: topics not co-partitioned: orders has 6 partitions, payments has 4"
        ),
        "{stdout}"
    );
}

#[test]
fn check_reports_keys_that_producers_partitioned_differently() {
    let _serial = serial();
    let dir = run_dir("check_reports_keys_that_producers_partitioned_differently");
    let tansu = join_broker(&dir);
    let config = join_config(
        &tansu.bootstrap,
        "check",
        &plugin("order_paid_rust.wasm"),
        "left",
    );
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
    assert!(
        stdout.contains("orders: 200 keys sampled, partitioned by murmur2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("payments: 150 keys sampled, partitioned by CRC32"),
        "{stdout}"
    );
}

#[test]
fn inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced() {
    let _serial = serial();
    let dir = run_dir(
        "inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced",
    );
    let tansu = join_broker(&dir);
    // The misbehave fixture panics (a trap) on keys starting with "panic", answers "ok <key>" else.
    let config = join_config(&tansu.bootstrap, "dlq", &plugin("misbehave.wasm"), "inner");
    let host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));

    let mut records = Vec::new();
    for i in 0..60 {
        let key = if i % 10 == 3 {
            format!("panic-{i}")
        } else {
            format!("ok-{i}")
        };
        let ts = stream::BASE_TS + i * 1000;
        for (topic, dt) in [("orders", 0), ("payments", 500)] {
            records.push(Record {
                topic,
                key: key.clone(),
                value: format!("{{\"i\":{i}}}"),
                timestamp: ts + dt,
            });
        }
    }
    tansu.produce(&tansu.producer("murmur2_random"), &records, None);

    let mut outputs = tansu.reader("orders-paid", 1);
    let outputs = outputs.read_until("54 matches produced", Duration::from_secs(60), |r| {
        r.len() >= 54
    });
    let mut dlq = tansu.reader("dlq", 1);
    // Each failed match dead-letters both of its inputs.
    let dead = dlq
        .read_until("12 dead letters", Duration::from_secs(60), |r| {
            r.len() >= 12
        })
        .to_vec();

    let mut produced: Vec<&str> = outputs.iter().map(|r| r.value.as_str()).collect();
    produced.sort_unstable();
    produced.dedup();
    assert_eq!(produced.len(), 54, "{produced:?}");
    assert!(
        produced.iter().all(|v| v.starts_with("ok ok-")),
        "{produced:?}"
    );

    let mut dead_keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
    dead_keys.sort_unstable();
    dead_keys.dedup();
    assert_eq!(
        dead_keys,
        ["panic-13", "panic-23", "panic-3", "panic-33", "panic-43", "panic-53"]
    );
    for r in &dead {
        assert_eq!(r.header("cojoin.error.kind"), Some("crash"), "{r:?}");
        assert!(
            r.header("cojoin.error.message")
                .is_some_and(|m| m.contains("wasm trap")),
            "{r:?}"
        );
        assert!(
            r.header("cojoin.plugin.version")
                .is_some_and(|v| v.starts_with("misbehave@")),
            "{r:?}"
        );
        let topic = r.header("cojoin.source.topic").unwrap();
        assert!(topic == "orders" || topic == "payments", "{r:?}");
        assert!(
            r.header("cojoin.source.partition")
                .unwrap()
                .parse::<i32>()
                .is_ok(),
            "{r:?}"
        );
        assert!(
            r.header("cojoin.source.offset")
                .unwrap()
                .parse::<i64>()
                .is_ok(),
            "{r:?}"
        );
    }
    eprintln!(
        "dead letters: {} records for keys {dead_keys:?}",
        dead.len()
    );
}
