//! A join of three topics (issue 32) on Apache Kafka: orders, payments and shipments, 6
//! partitions each, in one task per partition number across `cojoin run` processes, with a
//! kill -9 in the middle of the stream.

use std::time::{Duration, Instant};

use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
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
    let two = join_config(bootstrap, group, &plugin("order_shipped_rust.wasm"), "left");
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

#[test]
fn three_topics_on_three_hosts_one_killed_lose_no_match_or_expiry() {
    let test = "three_topics_on_three_hosts_one_killed_lose_no_match_or_expiry";
    let _serial = serial();
    let dir = run_dir(test);
    let kafka = join_broker(&dir);
    kafka.create_topic("shipments", PARTITIONS);
    let mut hosts = start_hosts_with(&dir, 3, &three_topic_config(&kafka.bootstrap, test));
    let t = Instant::now();
    let all: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&all, PARTITIONS, Duration::from_secs(90));

    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::three_topics(0, ORDERS / 2), None);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 60);
    let killed_tasks = hosts[0].assignments().pop().expect("host-0 held tasks").0;
    hosts[0].kill9();
    let bound = records_past_last_commit(&kafka, test, &TOPICS, &killed_tasks);
    eprintln!(
        "host-0 (tasks {killed_tasks:?}) killed after {:?}, {} outputs out; {bound} records on its partitions past the committed processed-through",
        t.elapsed(),
        reader.records.len()
    );
    kafka.produce(&producer, &stream::three_topics(ORDERS / 2, ORDERS), None);
    let survivors: Vec<&HostProcess> = hosts[1..].iter().collect();
    wait_for_stable_group(&survivors, PARTITIONS, Duration::from_secs(60));
    close_windows(&kafka, &producer);

    let expected = stream::expected_three(ORDERS);
    let tally = read_all_outcomes(&kafka, &expected);
    eprintln!(
        "three topics, 3 hosts, kill -9: matches {}, expiries {}, outputs {}, duplicates {} (bound {bound}) ({:?})",
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
    assert!(
        tally.duplicates as i64 <= bound,
        "{} duplicates, more than the {bound} records processed since the last commit: {tally:?}",
        tally.duplicates
    );
    assert_co_partitioned(&hosts);
    for h in &hosts {
        assert!(
            h.tasks_started_unpaired().is_empty(),
            "{} started a task without its partitions",
            h.name
        );
    }
}
