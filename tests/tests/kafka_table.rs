//! Stream–table joins (issue 33) on Apache Kafka, co-partitioned: `orders` (the stream) joined
//! with `payments` read as a versioned table, from a compacted topic the broker has really
//! compacted, across `cojoin run` processes; then a kill -9 and a scale-out during the stream, at
//! least once and exactly once.
//!
//! Every table row's value carries its version (`{"v": 7}`), which the order-paid plugin copies
//! into its output (`"payment"`), and every order its number (`{"n": 12}`, copied as `"order"`):
//! each output is checked against a reference computed here, the key's update with the largest
//! timestamp at or before the order's (`unpaid` when there is none, or it is a deletion).
//!
//! Compaction removes versions, so the stream is built for the rows compaction keeps:
//! - Phase 1, before any host starts: several updates and deletions per key, then the wait until
//!   the broker compacted the topic; its orders are stamped after the last update of their key
//!   (or before the first: no row), where the surviving version is the answer.
//! - Phase 2, while the hosts run: rounds of updates, each followed by orders stamped after it
//!   and orders stamped before it (looked up as of an older version the task already passed).
//!   The topic's `min.compaction.lag.ms` keeps the cleaner off these records (stamped within it
//!   of the wall clock), so a task restored after a kill or a move finds every version.
//!
//! Event time is decoupled from the wall clock (base: half an hour ago) and every order is
//! stamped seconds away from the updates around it, so no answer depends on machine speed.
//!
//! - `script`: the stream, the row each order must get, and the outputs judged against it (pure).
//! - `topic`: the table's topic on the broker: produced, read back, compacted.

#[path = "kafka_table/script.rs"]
mod script;
#[path = "kafka_table/topic.rs"]
mod topic;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config_for, wait_for_stable_group, HostProcess};
use cojoin_e2e::plugin;
use cojoin_e2e::scenario::{
    assert_co_partitioned, post_mortem, records_past_last_commit, run_dir, serial,
    start_hosts_with, PARTITIONS,
};
use script::{Round, Script, Verdict, MINUTE, ROUNDS};
use topic::{compacted_table, produce_orders, produce_updates};

/// The join config: `orders` left-joined with the versioned table `payments`, under the group
/// `protocol` and output `guarantee`.
fn table_config(protocol: &str, bootstrap: &str, group: &str, guarantee: &str) -> String {
    let wasm = plugin("order_paid_rust.wasm");
    let config = join_config_for(protocol, bootstrap, group, &wasm, "left")
        .replace("right = \"payments\"\n", "")
        .replace(
            "window = \"10s\"\n",
            "table = { topic = \"payments\", mode = \"versioned\", history = \"1h\" }\n",
        )
        .replace(
            "[output]\n",
            &format!("[output]\nguarantee = \"{guarantee}\"\n"),
        );
    assert!(
        config.contains("table = {") && !config.contains("window"),
        "{config}"
    );
    config
}

/// Reads the output topic until every order has an output (or 180 s pass), then `settle` more
/// for duplicates.
fn read_verdict(kafka: &Kafka, script: &Script, settle: Duration) -> Verdict {
    let expected = script.expected();
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_while_not(Duration::from_secs(180), |r| {
        Verdict::of(&expected, r).missing.is_empty()
    });
    Verdict::of(&expected, reader.read_for(settle))
}

/// The restores the hosts logged (`task P: table payments-P restored: N records read, ...`):
/// (partition, records read).
fn restores(hosts: &[HostProcess]) -> Vec<(usize, usize)> {
    let number = |text: &str| -> usize {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    hosts
        .iter()
        .flat_map(|h| {
            h.log_text()
                .lines()
                .filter_map(|l| {
                    let (_, rest) = l.split_once("table payments-")?;
                    let (_, read) = rest.split_once(" restored: ")?;
                    Some((number(rest), number(read)))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Event time's origin: half an hour ago, so that phase 2 (from 20 min) ends minutes before now.
fn base_ts() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_millis() as i64 - 30 * MINUTE
}

#[test]
fn a_compacted_table_joined_on_three_hosts_gives_every_order_its_row_as_of_its_time() {
    let test = "a_compacted_table_joined_on_three_hosts";
    let _serial = serial();
    let dir = run_dir(test);
    let script = Script::new(base_ts());
    let table = compacted_table(&dir, &script);
    let kafka = &table.kafka;
    let config = table_config("classic", &kafka.bootstrap, test, "at-least-once");
    let hosts = start_hosts_with(&dir, 3, &config);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let producer = kafka.producer("murmur2_random");
    produce_orders(&producer, &script.phase1_orders);
    for round in &script.rounds {
        produce_updates(&producer, &round.updates);
        produce_orders(&producer, &round.orders);
    }
    let verdict = read_verdict(kafka, &script, Duration::from_secs(3));
    eprintln!("{test}: {} ({:?})", verdict.summary(), t.elapsed());
    table.assert_phase2_intact();
    assert!(
        verdict.complete(),
        "{verdict:?}\n{}",
        post_mortem(kafka, &hosts)
    );
    assert_eq!(verdict.duplicates, 0, "no failure, no duplicate");
    assert!(verdict.paid > 0 && verdict.unpaid > 0, "{verdict:?}");

    // The hosts read the compacted table: no restore read more than what compaction left of
    // phase 1 plus phase 2's records, and every task restored.
    let ends = kafka.end_offsets("payments", PARTITIONS);
    let restores = restores(&hosts);
    eprintln!(
        "restores (partition, records read): {restores:?}; compacted phase 1 per partition {:?}",
        table.compacted
    );
    for (p, end) in ends.iter().enumerate() {
        let most = table.compacted[p] + (end - table.phase2_from[p]) as usize;
        assert!(
            restores.iter().any(|(q, _)| *q == p),
            "task {p} logged no restore"
        );
        for (_, read) in restores.iter().filter(|(q, _)| *q == p) {
            assert!(
                *read <= most,
                "task {p} restored {read} records, more than the {most} compaction left"
            );
        }
    }
    assert_co_partitioned(&hosts);
}

/// How a run with a kill -9 and a scale-out went.
struct Disrupted {
    verdict: Verdict,
    /// Records on the killed host's stream partitions past its last commit: what may repeat.
    bound: i64,
}

/// Three hosts under `protocol` and `guarantee`; phase 1's orders and half the rounds; kill -9
/// of host-0 once outputs come (restarted 2 s later when `restart`); two rounds more, the group
/// settled without it; a fourth host joins while the last rounds are produced.
fn kill_and_scale_out(test: &str, protocol: &str, guarantee: &str, restart: bool) -> Disrupted {
    let _serial = serial();
    let dir = run_dir(test);
    let script = Script::new(base_ts());
    let table = compacted_table(&dir, &script);
    let kafka = &table.kafka;
    let config = table_config(protocol, &kafka.bootstrap, test, guarantee);
    let mut hosts = start_hosts_with(&dir, 3, &config);
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let producer = kafka.producer("murmur2_random");
    let play = |rounds: &[Round]| {
        for round in rounds {
            produce_updates(&producer, &round.updates);
            produce_orders(&producer, &round.orders);
        }
    };
    produce_orders(&producer, &script.phase1_orders);
    play(&script.rounds[..ROUNDS / 2]);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("outputs before the kill", Duration::from_secs(90), |r| {
        r.len() >= 150
    });
    let killed_tasks = hosts[0].assignments().pop().expect("host-0 held tasks").0;
    hosts[0].kill9();
    let bound = records_past_last_commit(kafka, test, &["orders"], &killed_tasks);
    eprintln!(
        "host-0 (tasks {killed_tasks:?}) killed after {:?}, {} outputs out; {bound} orders on its partitions past the committed processed-through",
        t.elapsed(),
        reader.records.len()
    );
    play(&script.rounds[ROUNDS / 2..ROUNDS / 2 + 2]);
    if restart {
        std::thread::sleep(Duration::from_secs(2));
        hosts[0].restart(&dir);
    }
    // host-0 is out of the group for good unless it was restarted.
    fn alive(hosts: &[HostProcess], restart: bool) -> Vec<&HostProcess> {
        hosts[usize::from(!restart)..].iter().collect()
    }
    wait_for_stable_group(&alive(&hosts, restart), PARTITIONS, Duration::from_secs(90));
    eprintln!("group settled after the kill ({:?})", t.elapsed());
    hosts.push(HostProcess::start(&dir, "host-3", &config));
    play(&script.rounds[ROUNDS / 2 + 2..]);
    wait_for_stable_group(&alive(&hosts, restart), PARTITIONS, Duration::from_secs(90));
    eprintln!("group settled after the scale-out ({:?})", t.elapsed());

    let settle = Duration::from_secs(if guarantee == "exactly-once" { 5 } else { 3 });
    let verdict = read_verdict(kafka, &script, settle);
    eprintln!(
        "{test}: {}, bound {bound}; restores (partition, records read) {:?} ({:?})",
        verdict.summary(),
        restores(&hosts),
        t.elapsed()
    );
    table.assert_phase2_intact();
    assert!(
        verdict.complete(),
        "{verdict:?}\n{}",
        post_mortem(kafka, &hosts)
    );
    assert_co_partitioned(&hosts);
    for h in &hosts {
        assert!(
            h.tasks_started_unpaired().is_empty(),
            "{} started a task without its partitions",
            h.name
        );
    }
    Disrupted { verdict, bound }
}

#[test]
fn a_table_join_through_a_kill_and_a_scale_out_loses_no_order_and_keeps_every_row_right() {
    let run = kill_and_scale_out(
        "table_join_kill_and_scale_out",
        "consumer",
        "at-least-once",
        false,
    );
    assert!(
        run.verdict.duplicates as i64 <= run.bound,
        "{} duplicates, more than the {} orders processed since the last commit: {:?}",
        run.verdict.duplicates,
        run.bound,
        run.verdict
    );
}

#[test]
fn a_table_join_exactly_once_through_a_kill_and_a_scale_out_repeats_nothing() {
    let run = kill_and_scale_out(
        "table_join_exactly_once_kill_and_scale_out",
        "classic",
        "exactly-once",
        true,
    );
    // The reader is read_committed: an aborted transaction's outputs never show.
    assert_eq!(run.verdict.duplicates, 0, "{:?}", run.verdict);
}
