//! Joins whose topics are not co-partitioned, or whose key is a field of the value, on Apache
//! Kafka: cojoin re-keys a side into `<group>-<topic>-repartition` and joins that (issue 18).
//!
//! orders has 6 partitions; payments 4. The expected outcome of every order is known
//! (`stream::expected`); the join's output must be exactly that set, whatever partitioner the
//! payments were produced with, and with no grace, as the co-partitioned suites run it: one host's
//! repartition step merges its source partitions by timestamp, so the join finds nothing late. The
//! kill -9 test gives a grace of 1 h: two hosts' steps, one of them waiting for a failover, are
//! out of step by that much of the test's compressed event time (README "Repartitioning"); run
//! under exactly-once too, it must repeat nothing.

use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config, HostProcess};
use cojoin_e2e::plugin;
use cojoin_e2e::scenario::{post_mortem, read_all_outcomes, run_dir, serial};
use cojoin_e2e::stream::{self, Record, BASE_TS};

const ORDERS: u32 = 400;
const INTERNAL: &str = "repartition-test-payments-repartition";
const GROUP: &str = "repartition-test";

fn broker(dir: &std::path::Path) -> Kafka {
    let kafka = Kafka::start(dir);
    kafka.create_topic("orders", 6);
    kafka.create_topic("payments", 4);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    kafka
}

/// The left join of the suites (no grace, as the co-partitioned suites run it) with `extra`
/// join settings.
fn config(kafka: &Kafka, extra: &str) -> String {
    join_config(
        &kafka.bootstrap,
        GROUP,
        &plugin("order_paid_rust.wasm"),
        "left",
    )
    .replace("max_idle = \"1s\"", &format!("max_idle = \"1s\"\n{extra}"))
}

/// Payments far ahead in event time under 100 keys, so that every internal partition gets one
/// and every window closes.
fn ticks() -> Vec<Record> {
    (0..100)
        .map(|k| Record {
            topic: "payments",
            key: format!("tick-{k}"),
            value: format!("{{\"order_id\":\"tick-{k}\"}}"),
            timestamp: BASE_TS + 10_000_000,
        })
        .collect()
}

/// Every order's outcome, none missing or wrong; then the internal topic truncated up to the
/// join's committed offsets.
fn assert_joined_and_truncated(kafka: &Kafka, hosts: &[HostProcess]) {
    let tally = read_all_outcomes(kafka, &stream::expected(ORDERS));
    assert!(
        tally.missing.is_empty() && tally.wrong.is_empty(),
        "{tally:?}\n{}",
        post_mortem(kafka, hosts)
    );

    // DeleteRecords every 10 s up to the join's committed offsets: the first offset the join's
    // recovery reads (the ticks, whose windows never close here, stay).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let marks = kafka.watermarks(INTERNAL, 6);
        let committed: Vec<i64> = kafka
            .committed(GROUP, INTERNAL, 6)
            .into_iter()
            .map(|(offset, _)| offset)
            .collect();
        let lows: Vec<i64> = marks.iter().map(|(low, _)| *low).collect();
        if committed.iter().all(|c| *c > 0) && lows == committed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{INTERNAL} not truncated behind the join's commits within 60 s: watermarks {marks:?}, committed {committed:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn run(
    test: &str,
    partitioner: &str,
    extra: &str,
    payments: impl Fn(Vec<Record>) -> Vec<Record>,
) -> (Kafka, Vec<HostProcess>) {
    let dir = run_dir(test);
    let kafka = broker(&dir);
    let host = HostProcess::start(&dir, "host-0", &config(&kafka, extra));
    let (orders, pays): (Vec<Record>, Vec<Record>) = stream::orders(0, ORDERS)
        .into_iter()
        .partition(|r| r.topic == "orders");
    let murmur2 = kafka.producer("murmur2_random");
    kafka.produce(&murmur2, &orders, None);
    let other = kafka.producer(partitioner);
    kafka.produce(&other, &payments(pays), None);
    kafka.produce(&other, &ticks(), None);
    (kafka, vec![host])
}

#[test]
fn six_orders_partitions_join_four_payments_partitions_through_a_repartition_topic() {
    let _serial = serial();
    let (kafka, hosts) = run("repartition-counts", "murmur2_random", "", |p| p);
    assert_joined_and_truncated(&kafka, &hosts);
    let log = hosts[0].log_text();
    assert!(
        log.contains("repartitioning payments into repartition-test-payments-repartition: it has 4 partitions, orders has 6"),
        "{log}"
    );
}

#[test]
fn payments_produced_with_librdkafkas_default_partitioner_join_the_same() {
    let _serial = serial();
    let (kafka, hosts) = run("repartition-crc32", "consistent_random", "", |p| p);
    assert_joined_and_truncated(&kafka, &hosts);
}

#[test]
fn a_join_on_a_field_of_the_value_dead_letters_the_records_without_it() {
    let _serial = serial();
    // Payments keyed by their own id; the order id only in the value. Three lack it.
    let (kafka, hosts) = run(
        "repartition-field",
        "consistent_random",
        "right_key = \"/order_id\"",
        |pays| {
            let mut out: Vec<Record> = pays
                .into_iter()
                .enumerate()
                .map(|(i, r)| Record {
                    key: format!("pay-{i}"),
                    ..r
                })
                .collect();
            for (i, value) in ["{\"paid\":true}", "not json", "{\"order_id\":null}"]
                .into_iter()
                .enumerate()
            {
                out.push(Record {
                    topic: "payments",
                    key: format!("bad-{i}"),
                    value: value.to_owned(),
                    timestamp: BASE_TS + 5_000,
                });
            }
            out
        },
    );
    assert_joined_and_truncated(&kafka, &hosts);
    let mut dlq = kafka.reader("dlq", 1);
    let dead = dlq.read_until("three dead letters", Duration::from_secs(30), |r| {
        r.len() >= 3
    });
    let mut keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["bad-0", "bad-1", "bad-2"], "{dead:?}");
    for r in dead {
        let why = r.header("cojoin.error.message").unwrap_or_default();
        assert!(why.contains("/order_id"), "{why}");
        assert_eq!(r.header("cojoin.source.topic"), Some("payments"));
        assert_eq!(r.header("cojoin.error.kind"), Some("null-key"));
    }
    // 300 payments and 100 ticks written re-keyed, the 3 without the field dead-lettered.
    let url = hosts[0].admin_url(Duration::from_secs(5));
    let page = cojoin_e2e::http::get(&format!("{url}/metrics")).body;
    for line in [
        "cojoin_repartitioned_records_total 400",
        "cojoin_repartition_dead_letters_total 3",
        "cojoin_repartition_dropped_total 0",
    ] {
        assert!(page.lines().any(|l| l == line), "no {line:?} in\n{page}");
    }
}

/// A payment of 1.5 MB: the source topic takes it, the internal topic (the broker's 1 MB default)
/// refuses it. Before, the step retried it every second for ever and the side stalled behind it
/// (`/healthz` and `/readyz` 200); now it is written alone once, then dead-lettered (without its
/// value, which the dead-letter topic refuses too), and every order still gets its outcome.
#[test]
fn a_re_keyed_record_over_the_internal_topic_s_limit_is_dead_lettered_and_the_side_goes_on() {
    let _serial = serial();
    let dir = run_dir("repartition-too-large");
    let kafka = Kafka::start(&dir);
    kafka.create_topic("orders", 6);
    kafka.create_topic_with("payments", 4, &[("max.message.bytes", "4000000")]);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    // cojoin's producers would send it (their own limit raised); the broker refuses it. The
    // step writes the payments after each refused record's retry and dead letter, seconds on a
    // busy machine, while the internal topic looks caught up: the join waits up to 10 s (with
    // 1 s, two CPU hogs made 877 payments late and their orders unpaid).
    let config = config(&kafka, "")
        .replace(
            "[kafka.options]\n",
            "[kafka.options]\n\"message.max.bytes\" = \"4000000\"\n",
        )
        .replace("max_idle = \"1s\"", "max_idle = \"10s\"");
    assert!(config.contains("max_idle = \"10s\""), "{config}");
    assert!(config.contains("\"message.max.bytes\""), "{config}");
    let host = HostProcess::start(&dir, "host-0", &config);
    let (orders, pays): (Vec<Record>, Vec<Record>) = stream::orders(0, ORDERS)
        .into_iter()
        .partition(|r| r.topic == "orders");
    let producer = Kafka::producer_with(
        &kafka.bootstrap,
        "murmur2_random",
        &[("message.max.bytes".to_owned(), "4000000".to_owned())],
    );
    kafka.produce(&producer, &orders, None);
    // The large payment first in every payments partition: everything after it waits on it.
    let big: Vec<Record> = (0..4)
        .map(|p| Record {
            topic: "payments",
            key: format!("big-{p}"),
            value: "x".repeat(1_500_000),
            timestamp: BASE_TS,
        })
        .collect();
    for (p, record) in big.iter().enumerate() {
        kafka.produce(&producer, std::slice::from_ref(record), Some(p as i32));
    }
    kafka.produce(&producer, &pays, None);
    kafka.produce(&producer, &ticks(), None);
    let tally = read_all_outcomes(&kafka, &stream::expected(ORDERS));
    assert!(
        tally.missing.is_empty() && tally.wrong.is_empty(),
        "{tally:?}\n{}",
        post_mortem(&kafka, std::slice::from_ref(&host))
    );
    let mut dlq = kafka.reader("dlq", 1);
    // The batches that failed on them were read again: what they had written before is in the
    // internal topic twice, and the second copies are dead-lettered as late (at-least-once).
    let refused = |r: &cojoin_e2e::broker::ReadRecord| {
        r.header("cojoin.error.kind") == Some("output-refused")
    };
    let dead: Vec<_> = dlq
        .read_until(
            "the large payments' dead letters",
            Duration::from_secs(30),
            |r| r.iter().filter(|r| refused(r)).count() >= 4,
        )
        .iter()
        .filter(|r| refused(r))
        .cloned()
        .collect();
    let mut keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["big-0", "big-1", "big-2", "big-3"], "{dead:?}");
    for r in &dead {
        assert_eq!(
            r.header("cojoin.error.kind"),
            Some("output-refused"),
            "{:?}",
            r.headers
        );
        let why = r.header("cojoin.error.message").unwrap_or_default();
        assert!(why.contains(INTERNAL), "{why}");
        assert_eq!(r.header("cojoin.source.topic"), Some("payments"));
        assert!(
            r.header("cojoin.value.omitted").is_some(),
            "{:?}",
            r.headers
        );
        assert_eq!(r.value, "", "the dead-letter topic refused the value");
    }
    let url = host.admin_url(Duration::from_secs(5));
    let ready = cojoin_e2e::http::get(&format!("{url}/readyz"));
    assert_eq!(ready.status, 200, "{}", ready.body);
    let page = cojoin_e2e::http::get(&format!("{url}/metrics")).body;
    for line in [
        "cojoin_repartition_dead_letters_total 4",
        "cojoin_repartition_failing_seconds 0",
    ] {
        assert!(page.lines().any(|l| l == line), "no {line:?} in\n{page}");
    }
}

#[test]
fn a_host_killed_while_repartitioning_loses_no_match() {
    let (_, tally) = kill_while_repartitioning("at-least-once");
    eprintln!("at-least-once, after kill -9: {tally:?}");
}

/// Under exactly-once the step writes a batch and commits its input in one transaction, and the
/// join reads the internal topic read_committed: a read_committed reader of the output sees
/// every outcome once, kill -9 or not.
#[test]
fn exactly_once_with_a_repartitioned_side_repeats_nothing_after_a_kill() {
    let (kafka, tally) = kill_while_repartitioning("exactly-once");
    eprintln!("exactly-once, after kill -9: {tally:?}");
    if tally.duplicates > 0 {
        // Whether the step wrote a payment twice or the join matched one twice.
        let mut internal = kafka.reader(INTERNAL, 6);
        let written = internal.read_for(Duration::from_secs(5));
        for order in &tally.duplicated {
            let copies: Vec<&str> = written
                .iter()
                .filter(|r| r.key == *order)
                .map(|r| r.value.as_str())
                .collect();
            eprintln!("{order}: in {INTERNAL} (read_committed): {copies:?}");
        }
    }
    assert_eq!(tally.duplicates, 0, "{tally:?}");
}

/// Two hosts under `guarantee`; one is killed -9 mid-stream and restarted. Every order's outcome
/// must come (what a read_committed reader of the output got).
fn kill_while_repartitioning(guarantee: &str) -> (Kafka, stream::Tally) {
    let _serial = serial();
    let dir = run_dir(&format!("repartition-kill-{guarantee}"));
    let kafka = broker(&dir);
    // Two hosts' steps: one may lag the other (here by a failover), which grace must cover.
    let config = config(&kafka, "grace = \"1h\"").replace(
        "[output]\n",
        &format!("[output]\nguarantee = \"{guarantee}\"\n"),
    );
    let mut hosts: Vec<HostProcess> = (0..2)
        .map(|i| HostProcess::start(&dir, &format!("host-{i}"), &config))
        .collect();
    let producer = kafka.producer("murmur2_random");
    let produce = |from, to| {
        let (orders, pays): (Vec<Record>, Vec<Record>) = stream::orders(from, to)
            .into_iter()
            .partition(|r| r.topic == "orders");
        kafka.produce(&producer, &orders, None);
        kafka.produce(&producer, &pays, None);
    };
    produce(0, KILL_ORDERS / 2);
    // Once results flow, kill one host; the second half is repartitioned while the group
    // moves its partitions (of the join and of the repartition step), and it comes back.
    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until("the first results", Duration::from_secs(120), |r| {
        r.len() >= 100
    });
    hosts[1].kill9();
    produce(KILL_ORDERS / 2, KILL_ORDERS);
    std::thread::sleep(Duration::from_secs(2));
    hosts[1].restart(&dir);
    // Every match first: the ticks that close the windows come last, as time passes in a live
    // stream. Produced earlier, a tick written by the surviving host's step while the killed
    // host's source partitions wait for the group to move them would put stream time hours of
    // event time ahead of their payments, which would then be late (README "Repartitioning").
    let all = stream::expected(KILL_ORDERS);
    let paid: std::collections::BTreeMap<String, &'static str> = all
        .iter()
        .filter(|(_, s)| **s == "paid")
        .map(|(k, s)| (k.clone(), *s))
        .collect();
    let tally = cojoin_e2e::scenario::tally_once_complete(
        &mut outputs,
        &paid,
        Duration::from_secs(180),
        Duration::ZERO,
    );
    assert!(
        tally.missing.is_empty(),
        "matches lost after kill -9: {tally:?}\n{}",
        post_mortem(&kafka, &hosts)
    );
    kafka.produce(&producer, &ticks(), None);
    let tally = cojoin_e2e::scenario::tally_once_complete(
        &mut outputs,
        &stream::expected(KILL_ORDERS),
        Duration::from_secs(180),
        Duration::from_secs(3),
    );
    assert!(
        tally.missing.is_empty() && tally.wrong.is_empty(),
        "{tally:?}\n{}",
        post_mortem(&kafka, &hosts)
    );
    (kafka, tally)
}

const KILL_ORDERS: u32 = 3000;
