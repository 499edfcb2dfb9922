//! A join of three topics (issue 32) on Apache Kafka: orders, payments and shipments, 6
//! partitions each, in one task per partition number across `cojoin run` processes, with a
//! kill -9 in the middle of the stream.

use std::time::{Duration, Instant};

use cojoin_e2e::hosts::{join_config_for, wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{
    assert_co_partitioned, close_windows, join_broker, post_mortem, read_all_outcomes,
    records_past_last_commit, run_dir, serial, start_hosts_with, PARTITIONS,
};
use cojoin_e2e::{plugin, stream};

const ORDERS: u32 = 400;
const TOPICS: [&str; 3] = ["orders", "payments", "shipments"];

/// The order-shipped left join of the three topics, in group `group`. Grace covers the burst in
/// which each half of the stream is produced (as kafka_join's kill test: a few ms of skew between
/// topics' appends is minutes of event time here).
fn three_topic_config(bootstrap: &str, group: &str) -> String {
    three_topic_config_for("classic", bootstrap, group)
}

/// [`three_topic_config`] under the group `protocol` (as `join_config_for`).
fn three_topic_config_for(protocol: &str, bootstrap: &str, group: &str) -> String {
    let wasm = plugin("order_shipped_rust.wasm");
    let two = join_config_for(protocol, bootstrap, group, &wasm, "left");
    let three = two
        .replace(
            "left = \"orders\"\nright = \"payments\"\n",
            "topics = [\"orders\", \"payments\", \"shipments\"]\n",
        )
        .replace(
            "max_idle = \"1s\"\n",
            "max_idle = \"1s\"\ngrace = \"10m\"\n",
        );
    assert!(
        three.contains("topics = [") && three.contains("grace"),
        "{three}"
    );
    three
}

/// How a three-topic run with a kill -9 went.
struct Run {
    tally: cojoin_e2e::stream::Tally,
    /// Records on the killed host's partitions past its last commit: what may repeat.
    bound: i64,
}

/// Three hosts with `config` (made for the broker and group by `make_config`), the stream's first
/// half, kill -9 of host-0 once 60 outputs are out (restarted after 2 s when `restart`), the
/// second half, every window closed; `shipments` records are produced as `shipment` makes them.
fn kill_mid_stream(
    test: &str,
    make_config: impl Fn(&str, &str) -> String,
    restart: bool,
    shipment: impl Fn(stream::Record) -> stream::Record,
) -> Run {
    let _serial = serial();
    let dir = run_dir(test);
    let kafka = join_broker(&dir);
    kafka.create_topic("shipments", PARTITIONS);
    let config = make_config(&kafka.bootstrap, test);
    let mut hosts = start_hosts_with(&dir, 3, &config);
    let t = Instant::now();
    let all: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&all, PARTITIONS, Duration::from_secs(90));

    let records = |from, to| -> Vec<stream::Record> {
        (stream::three_topics(from, to).into_iter())
            .map(|r| {
                if r.topic == "shipments" {
                    shipment(r)
                } else {
                    r
                }
            })
            .collect()
    };
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &records(0, ORDERS / 2), None);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(90), |r| r.len() >= 60);
    let killed_tasks = hosts[0].assignments().pop().expect("host-0 held tasks").0;
    hosts[0].kill9();
    let bound = records_past_last_commit(&kafka, test, &TOPICS, &killed_tasks);
    eprintln!(
        "host-0 (tasks {killed_tasks:?}) killed after {:?}, {} outputs out; {bound} records on its partitions past the committed processed-through",
        t.elapsed(),
        reader.records.len()
    );
    kafka.produce(&producer, &records(ORDERS / 2, ORDERS), None);
    if restart {
        std::thread::sleep(Duration::from_secs(2));
        hosts[0].restart(&dir);
    }
    let group: Vec<&HostProcess> = hosts.iter().skip(usize::from(!restart)).collect();
    wait_for_stable_group(&group, PARTITIONS, Duration::from_secs(90));
    // A repartitioned topic reaches the join one hop later: the tick that closes every window
    // must not overtake it (its records would be late), so it waits for the internal topic.
    let internal = format!("{test}-shipments-repartition");
    if config.contains("keys = {") {
        let shipments = records(0, ORDERS)
            .iter()
            .filter(|r| r.topic == "shipments")
            .count();
        let deadline = Instant::now() + Duration::from_secs(60);
        while kafka.end_offsets(&internal, PARTITIONS).iter().sum::<i64>() < shipments as i64 {
            assert!(
                Instant::now() < deadline,
                "{internal} never held all {shipments} shipments"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    close_windows(&kafka, &producer);

    let tally = read_all_outcomes(&kafka, &stream::expected_three(ORDERS));
    eprintln!(
        "{test}: matches {}, expiries {}, outputs {}, duplicates {} (bound {bound}) ({:?})",
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
    assert_eq!((tally.matches, tally.expiries), (200, 200));
    assert_co_partitioned(&hosts);
    for h in &hosts {
        assert!(
            h.tasks_started_unpaired().is_empty(),
            "{} started a task without its partitions",
            h.name
        );
    }
    Run { tally, bound }
}

/// COJOIN_KILL_ROUNDS rounds (default 1; `make soak` runs 5), each on its own broker and group.
#[test]
fn three_topics_on_three_hosts_one_killed_lose_no_match_or_expiry() {
    let rounds: usize = std::env::var("COJOIN_KILL_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut figures = Vec::new();
    for round in 0..rounds {
        let test = match round {
            0 => "three_topics_on_three_hosts_one_killed_lose_no_match_or_expiry".to_owned(),
            _ => format!("three-topics-kill-9-round-{round}"),
        };
        let run = kill_mid_stream(&test, three_topic_config, false, |r| r);
        assert!(
            run.tally.duplicates as i64 <= run.bound,
            "{} duplicates, more than the {} records processed since the last commit: {:?}",
            run.tally.duplicates,
            run.bound,
            run.tally
        );
        figures.push((
            run.tally.matches,
            run.tally.expiries,
            run.tally.duplicates,
            run.bound,
        ));
    }
    eprintln!("three topics, kill -9 rounds (matches, expiries, duplicates, bound): {figures:?}");
}

#[test]
fn three_topics_exactly_once_a_host_killed_and_restarted_repeats_nothing() {
    let config = |bootstrap: &str, group: &str| {
        three_topic_config(bootstrap, group)
            .replace("[output]\n", "[output]\nguarantee = \"exactly-once\"\n")
    };
    let run = kill_mid_stream(
        "three_topics_exactly_once_a_host_killed_and_restarted_repeats_nothing",
        config,
        true,
        |r| r,
    );
    // The reader is read_committed: an aborted transaction's outputs never show.
    assert_eq!(run.tally.duplicates, 0, "{:?}", run.tally);
}

#[test]
fn three_topics_one_keyed_from_its_value_is_repartitioned_and_joins_all_the_same() {
    // Shipments keyed by their own id, the order id in the value: re-keyed into an internal
    // topic by cojoin before the join reads it.
    let config = |bootstrap: &str, group: &str| {
        three_topic_config(bootstrap, group).replace(
            "topics = [",
            "keys = { shipments = \"/order_id\" }\ntopics = [",
        )
    };
    let run = kill_mid_stream(
        "three_topics_one_keyed_from_its_value_is_repartitioned_and_joins_all_the_same",
        config,
        false,
        |r| stream::Record {
            key: format!("shipment-of-{}", r.key),
            ..r
        },
    );
    assert_eq!(run.tally.matches, 200);
    assert!(run.tally.duplicates as i64 <= run.bound, "{:?}", run.tally);
}

/// Which host holds each task, from the hosts' latest assignments.
fn owners(hosts: &[HostProcess]) -> std::collections::BTreeMap<i32, String> {
    let mut owners = std::collections::BTreeMap::new();
    for h in hosts {
        for p in h
            .assignments()
            .pop()
            .map(|(left, _)| left)
            .unwrap_or_default()
        {
            owners.insert(p, h.name.clone());
        }
    }
    owners
}

#[test]
fn three_topics_scaled_out_under_the_consumer_protocol_move_only_some_tasks_and_lose_nothing() {
    let test = "three_topics_scaled_out_under_the_consumer_protocol";
    let _serial = serial();
    let dir = run_dir(test);
    let kafka = join_broker(&dir);
    kafka.create_topic("shipments", PARTITIONS);
    let config = three_topic_config_for("consumer", &kafka.bootstrap, test);
    let mut hosts = start_hosts_with(&dir, 2, &config);
    let two: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&two, PARTITIONS, Duration::from_secs(90));

    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::three_topics(0, ORDERS / 2), None);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(90), |r| r.len() >= 60);
    let before = owners(&hosts);
    let started_before: Vec<Vec<i32>> = hosts.iter().map(HostProcess::tasks_started).collect();
    hosts.push(HostProcess::start(&dir, "host-2", &config));
    let three: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&three, PARTITIONS, Duration::from_secs(90));
    let after = owners(&hosts);
    let moved: Vec<i32> = (0..PARTITIONS)
        .filter(|p| before.get(p) != after.get(p))
        .collect();
    // A task that stayed on its host and was started again there: it should not be.
    let restarted: Vec<i32> = (0..PARTITIONS)
        .filter(|p| !moved.contains(p))
        .filter(|p| {
            let i: usize = before[p].trim_start_matches("host-").parse().unwrap();
            let starts = |s: &[i32]| s.iter().filter(|t| *t == p).count();
            starts(&hosts[i].tasks_started()) > starts(&started_before[i])
        })
        .collect();
    eprintln!("scale-out 2 -> 3, three topics: owners {before:?} -> {after:?}; moved {moved:?}, restarted in place {restarted:?}");
    assert!(
        !moved.is_empty() && moved.len() < PARTITIONS as usize,
        "moved {moved:?}"
    );
    assert!(
        restarted.is_empty(),
        "tasks restarted in place: {restarted:?}"
    );

    kafka.produce(&producer, &stream::three_topics(ORDERS / 2, ORDERS), None);
    close_windows(&kafka, &producer);
    let tally = read_all_outcomes(&kafka, &stream::expected_three(ORDERS));
    eprintln!(
        "three topics through a scale-out: matches {}, expiries {}, outputs {}, duplicates {}",
        tally.matches, tally.expiries, tally.outputs, tally.duplicates
    );
    assert!(
        tally.complete(),
        "{tally:?}\n{}",
        post_mortem(&kafka, &hosts)
    );
    assert_eq!((tally.matches, tally.expiries), (200, 200));
    for h in &hosts {
        assert!(h.tasks_started_unpaired().is_empty(), "{}", h.name);
    }
}

#[test]
fn check_covers_every_topic_of_a_three_topic_join_and_names_a_misplaced_one() {
    let test = "check_covers_every_topic_of_a_three_topic_join";
    let _serial = serial();
    let dir = run_dir(test);
    let kafka = join_broker(&dir);
    kafka.create_topic("shipments", PARTITIONS);
    let config_path = dir.join("check.toml");
    std::fs::write(&config_path, three_topic_config(&kafka.bootstrap, test)).unwrap();
    let records = stream::three_topics(0, 200);
    let (shipments, rest): (Vec<_>, Vec<_>) =
        records.into_iter().partition(|r| r.topic == "shipments");
    kafka.produce(&kafka.producer("murmur2_random"), &rest, None);
    // Shipments from librdkafka's default partitioner (CRC32): they would never join.
    kafka.produce(&kafka.producer("consistent_random"), &shipments, None);
    let out = cojoin_e2e::cojoin(&["check", "--config", config_path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for line in [
        "orders: 6 partitions; payments: 6 partitions; shipments: 6 partitions",
        "no repartitioning: the join reads orders, payments and shipments as they are",
        "orders: 200 keys sampled, partitioned by murmur2",
        "shipments: 150 keys sampled, partitioned by CRC32",
        "keys found in both orders and payments, all in the same partition number",
        "keys found in both orders and shipments sit in different partition numbers",
        "every topic re-keyed by cojoin",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}
