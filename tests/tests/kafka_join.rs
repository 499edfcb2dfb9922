//! cojoin on Apache Kafka: the broker as a separate process, several `cojoin run` processes in one
//! consumer group, kill -9 (with and without a restart), partition-count and partitioner problems,
//! dead letters from a trapping plugin. Each test starts its own broker.

use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config, join_config_for, wait_for_stable_group, HostProcess};
use cojoin_e2e::http::{get, sample};
use cojoin_e2e::scenario::{
    assert_co_partitioned, close_windows, join_broker, post_mortem, read_all_outcomes,
    records_past_last_commit, run_dir, serial, start_hosts, start_hosts_with, PARTITIONS,
};
use cojoin_e2e::stream::{self, Record};
use cojoin_e2e::{cojoin, plugin};

const ORDERS: u32 = 600;

#[test]
fn three_hosts_produce_exactly_the_expected_matches_and_expiries() {
    let _serial = serial();
    let dir = run_dir("three_hosts_produce_exactly_the_expected_matches_and_expiries");
    let kafka = join_broker(&dir);
    let hosts = start_hosts(&dir, &kafka, "three-hosts", 3);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    eprintln!("group of 3 stable after {:?}", t.elapsed());

    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS), None);
    close_windows(&kafka, &producer);
    let tally = read_all_outcomes(&kafka, &stream::expected(ORDERS));
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

/// How a kill -9 went: what was read back, the bound on what may repeat, and the join state
/// bytes the hosts still running had spilled to disk.
struct KillReport {
    tally: cojoin_e2e::stream::Tally,
    bound: i64,
    spilled: u64,
}

/// The second half is produced in one burst of 300 s of event time: a few ms of skew between the
/// two topics' appends is all of it. Under two CPU hogs the orders of one partition reached the
/// broker over a second after their payments (its end offset, asked then, had not moved), and 51
/// orders came late (b6569f1). Grace covers the burst, so the result does not depend on the
/// machine's speed; the close-windows tick is 10,000 s ahead.
const SECOND_HALF_GRACE: &str = "grace = \"10m\"";

/// `n` hosts, the stream's first half, kill -9 of host-0 once 100 outputs are out, the second
/// half; with `restart_after`, host-0 comes back after that long (as a supervisor would restart
/// it), else the survivors take its tasks by themselves. Then every outcome is checked: none lost,
/// duplicates within the bound.
/// `extra` is appended to every host's config.
fn kill_mid_stream(
    test: &str,
    n: usize,
    restart_after: Option<Duration>,
    extra: &str,
) -> KillReport {
    let _serial = serial();
    let dir = run_dir(test);
    let kafka = join_broker(&dir);
    let config = join_config(
        &kafka.bootstrap,
        test,
        &plugin("order_paid_rust.wasm"),
        "left",
    )
    .replace(
        "max_idle = \"1s\"\n",
        &format!("max_idle = \"1s\"\n{SECOND_HALF_GRACE}\n"),
    ) + extra;
    assert!(config.contains("grace"), "{config}");
    let mut hosts = start_hosts_with(&dir, n, &config);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );

    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS / 2), None);
    // Mid-stream: part of the first half is out, so every host has processed and committed some.
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 100);
    let killed_tasks = hosts[0].assignments().pop().expect("host-0 held tasks").0;
    hosts[0].kill9();
    // Read before anyone else owns its tasks (that takes the 6 s session timeout).
    let bound = records_past_last_commit(&kafka, test, &["orders", "payments"], &killed_tasks);
    eprintln!(
        "host-0 (tasks {killed_tasks:?}) killed after {:?}, {} outputs out; {bound} records on its partitions past the committed processed-through",
        t.elapsed(),
        reader.records.len()
    );

    kafka.produce(&producer, &stream::orders(ORDERS / 2, ORDERS), None);
    let group: Vec<&HostProcess> = match restart_after {
        Some(down) => {
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
            hosts.iter().collect()
        }
        None => hosts[1..].iter().collect(),
    };
    wait_for_stable_group(&group, PARTITIONS, Duration::from_secs(60));
    eprintln!(
        "{} host(s) hold every task after {:?}",
        group.len(),
        t.elapsed()
    );
    close_windows(&kafka, &producer);

    let tally = read_all_outcomes(&kafka, &stream::expected(ORDERS));
    eprintln!(
        "{n} host(s), kill -9{}: events {}, matches {}, expiries {}, outputs {}, duplicates {} (bound {bound}) ({:?})",
        if restart_after.is_some() { " + restart" } else { ", no restart" },
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
        post_mortem(&kafka, &hosts)
    );
    assert_eq!((tally.matches, tally.expiries), (450, 150));
    assert!(
        tally.duplicates as i64 <= bound,
        "{} duplicates, more than the {bound} records processed since the last commit: {tally:?}",
        tally.duplicates
    );
    assert_co_partitioned(&hosts);
    let spilled = group
        .iter()
        .map(|h| {
            let page = get(&format!("{}/metrics", h.admin_url(Duration::from_secs(10)))).body;
            sample(&page, "cojoin_state_spilled_bytes_total").unwrap_or(0.0) as u64
        })
        .sum();
    KillReport {
        tally,
        bound,
        spilled,
    }
}

/// One host: the restarted process must rebuild every task from the commits the killed one left.
#[test]
fn the_only_host_killed_mid_stream_and_restarted_loses_no_match_or_expiry() {
    kill_mid_stream("kill-9-one-host", 1, Some(Duration::from_secs(1)), "");
}

/// Join state on disk is a cache: with every full segment of state spilled (a zero budget), a
/// host killed mid-stream and restarted rebuilds its tasks from Kafka as always, and its spill
/// files of the killed process are removed by the next start.
#[test]
fn a_host_killed_while_its_state_is_on_disk_loses_no_match_or_expiry() {
    let state = run_dir("kill-9-spilled").join("state");
    let r = kill_mid_stream(
        "kill-9-spilled",
        1,
        Some(Duration::from_secs(1)),
        &format!("[memory]\nstate_bytes = 0\n[state]\ndir = {:?}\n", state),
    );
    assert!(
        r.spilled > 0,
        "no state was spilled: the test proves nothing"
    );
    let dirs: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "the killed host's spill directory is left: {dirs:?}"
    );
}

/// Three hosts, host-0 killed and never restarted: after the session timeout (6 s) the broker
/// moves its tasks to the two survivors, which rebuild them from host-0's commits.
#[test]
fn one_of_three_hosts_killed_mid_stream_moves_its_tasks_to_the_survivors_and_loses_nothing() {
    let rounds: usize = std::env::var("COJOIN_KILL_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut figures = Vec::new();
    for round in 0..rounds {
        let r = kill_mid_stream(&format!("kill-9-three-hosts-{round}"), 3, None, "");
        figures.push((
            r.tally.matches,
            r.tally.expiries,
            r.tally.duplicates,
            r.bound,
        ));
    }
    eprintln!("kill -9 rounds (matches, expiries, duplicates, bound): {figures:?}");
}

#[test]
fn topics_with_different_partition_counts_are_refused_with_repartition_never_and_check_says_what_auto_does(
) {
    let _serial = serial();
    let dir = run_dir("topics_with_different_partition_counts");
    let kafka = Kafka::start(&dir);
    kafka.create_topic("orders", 6);
    kafka.create_topic("payments", 4);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    let auto = join_config(
        &kafka.bootstrap,
        "unequal",
        &plugin("order_paid_rust.wasm"),
        "left",
    );
    let never = auto.replace(
        "max_idle = \"1s\"",
        "max_idle = \"1s\"\nrepartition = \"never\"",
    );
    let mut host = HostProcess::start(&dir, "host", &never);
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

    // By default the join repartitions payments, and check says so and what it costs.
    let auto_path = dir.join("auto.toml");
    std::fs::write(&auto_path, &auto).unwrap();
    let out = cojoin(&["check", "--config", auto_path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "repartitioning: payments is re-keyed into unequal-payments-repartition (6 partitions, murmur2) because it has 4 partitions, orders has 6; that costs one more write and read of payments"
        ),
        "{stdout}"
    );
}

#[test]
fn check_reports_keys_that_producers_partitioned_differently() {
    let _serial = serial();
    let dir = run_dir("check_reports_keys_that_producers_partitioned_differently");
    let kafka = join_broker(&dir);
    let config = join_config_for(
        "auto",
        &kafka.bootstrap,
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
    kafka.produce(&kafka.producer("murmur2_random"), &orders, None);
    kafka.produce(&kafka.producer("consistent_random"), &payments, None);
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
    // Apache Kafka 4.4 enables the consumer group protocol, and auto takes it.
    assert!(
        stdout.contains("group protocol consumer: the broker enables it"),
        "{stdout}"
    );
}

#[test]
fn inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced() {
    let _serial = serial();
    let dir = run_dir(
        "inputs_of_a_trapping_plugin_land_in_the_dead_letter_topic_and_the_rest_is_produced",
    );
    let kafka = join_broker(&dir);
    // The misbehave fixture panics (a trap) on keys starting with "panic", answers "ok <key>" else.
    // Also: more workers than the 6 tasks start only 6 instances, and the host says so.
    let config = join_config(&kafka.bootstrap, "dlq", &plugin("misbehave.wasm"), "inner")
        .replace("retries = 1", "retries = 1\nworkers = 50");
    let host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));
    assert!(
        host.log_text().contains(
            "plugin.workers is 50 but the join has 6 partitions (tasks): starting 6 workers"
        ),
        "{}",
        host.log_text()
    );

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
    kafka.produce(&kafka.producer("murmur2_random"), &records, None);

    let mut outputs = kafka.reader("orders-paid", 1);
    let outputs = outputs.read_until("54 matches produced", Duration::from_secs(60), |r| {
        r.len() >= 54
    });
    let mut dlq = kafka.reader("dlq", 1);
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
                .is_some_and(|m| m.contains("wasm trap")
                    && m.contains(&format!("fixture panic for key {}", r.key))),
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
