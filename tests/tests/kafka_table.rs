//! Stream–table joins (issue 33) on Apache Kafka: `orders` (the stream) joined with `payments`
//! read as a table, from a compacted topic the broker has really compacted, across `cojoin run`
//! processes; then a kill -9 and a scale-out during the stream, at least once and exactly once.
//! Each test runs with the table co-partitioned (versioned, task p holding partition p of both
//! topics) and global (every host reading the whole table, latest rows; `orders` with 4
//! partitions, `payments` with 6).
//!
//! Every table row's value carries its version (`{"v": 7}`), which the order-paid plugin copies
//! into its output (`"payment"`), and every order its number (`{"n": 12}`, copied as `"order"`):
//! each output is checked against a reference computed here — co-partitioned, the key's update
//! with the largest timestamp at or before the order's; global, the key's last update produced
//! before the order, the hosts being kept in lockstep with the feed (see `feed`) — `unpaid` when
//! there is none, or it is a deletion.
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
//! - `feed`: the script produced while the hosts run (in lockstep with a global table's views),
//!   and the restores the hosts logged.

#[path = "kafka_table/feed.rs"]
mod feed;
#[path = "kafka_table/script.rs"]
mod script;
#[path = "kafka_table/topic.rs"]
mod topic;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config_for, wait_for_stable_group, HostProcess};
use cojoin_e2e::plugin;
use cojoin_e2e::scenario::{
    assert_co_partitioned, post_mortem, run_dir, serial, start_hosts_with, uncommitted, PARTITIONS,
};
use feed::{task_restores, Feed};
use script::{Scope, Script, Verdict, MINUTE, ROUNDS};
use topic::{compacted_table, Table};

/// The join config: `orders` left-joined with the table `payments` (versioned when
/// co-partitioned, latest when global), under the group `protocol` and output `guarantee`.
fn table_config(
    scope: Scope,
    protocol: &str,
    bootstrap: &str,
    group: &str,
    guarantee: &str,
) -> String {
    let table = match scope {
        Scope::CoPartitioned => {
            "table = { topic = \"payments\", mode = \"versioned\", history = \"1h\" }\n"
        }
        Scope::Global => "table = { topic = \"payments\", scope = \"global\" }\n",
    };
    let wasm = plugin("order_paid_rust.wasm");
    let config = join_config_for(protocol, bootstrap, group, &wasm, "left")
        .replace("right = \"payments\"\n", "")
        .replace("window = \"10s\"\n", table)
        // 1 s, not exactly-once's 100 ms: a kill right after a round's orders most likely
        // finds their outputs in an open transaction.
        .replace(
            "[output]\n",
            &format!("[output]\nguarantee = \"{guarantee}\"\ncommit_interval = \"1s\"\n"),
        );
    assert!(
        config.contains("table = {") && !config.contains("window"),
        "{config}"
    );
    config
}

/// Reads the output topic until every order has an output (or 180 s pass), then `settle` more
/// for duplicates.
fn read_verdict(kafka: &Kafka, script: &Script, scope: Scope, settle: Duration) -> Verdict {
    let expected = script.expected(scope);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_while_not(Duration::from_secs(180), |r| {
        Verdict::of(&expected, r).missing.is_empty()
    });
    Verdict::of(&expected, reader.read_for(settle))
}

/// Event time's origin: half an hour ago, so that phase 2 (from 20 min) ends minutes before now.
fn base_ts() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_millis() as i64 - 30 * MINUTE
}

/// Every host's every assignment was whole: co-partitioned, the same partition numbers of both
/// topics; global, `orders`' partitions alone, not repartitioned (the group read `orders`).
fn assert_tasks_whole(scope: Scope, hosts: &[HostProcess]) {
    match scope {
        Scope::CoPartitioned => assert_co_partitioned(hosts),
        Scope::Global => {
            for h in hosts {
                let log = h.log_text();
                assert!(
                    log.contains("\"stream\":\"orders\"") && !log.contains("repartition"),
                    "{}: the group should read orders alone:\n{log}",
                    h.name
                );
            }
        }
    }
}

/// The hosts read the compacted table. Co-partitioned: every task restored, none read more than
/// what compaction left of phase 1 plus phase 2's records. Global: each host restored the whole
/// table on each start (what it read checked when it logged it: see [`Feed::host_started`]).
fn assert_restored(scope: Scope, table: &Table, hosts: &[HostProcess], feed: &Feed) {
    if scope == Scope::Global {
        eprintln!("restores: {:?}", feed.restores);
        for h in hosts {
            assert!(
                feed.restores.iter().any(|r| r.host == h.name),
                "{} logged no restore",
                h.name
            );
        }
        return;
    }
    let ends = table.kafka.end_offsets("payments", PARTITIONS);
    let restores = task_restores(hosts);
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
}

/// Three hosts, no failure: phase 1's orders and every round; every order gets its row, once,
/// and every host read the compacted table.
fn on_three_hosts(test: &str, scope: Scope) {
    let _serial = serial();
    let dir = run_dir(test);
    let script = Script::new(base_ts());
    let table = compacted_table(&dir, &script, scope.orders_partitions());
    let kafka = &table.kafka;
    let config = table_config(scope, "classic", &kafka.bootstrap, test, "at-least-once");
    let hosts = start_hosts_with(&dir, 3, &config);
    let mut feed = Feed::new(&table, &script, test, scope);
    hosts.iter().for_each(|h| feed.host_started(h));
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        scope.orders_partitions(),
        Duration::from_secs(90),
    );
    feed.phase1();
    for r in 0..ROUNDS {
        feed.round(r, &hosts);
    }
    let verdict = read_verdict(kafka, &script, scope, Duration::from_secs(3));
    eprintln!("{test}: {} ({:?})", verdict.summary(), t.elapsed());
    table.assert_phase2_intact();
    assert!(
        verdict.complete(),
        "{verdict:?}\n{}",
        post_mortem(kafka, &hosts)
    );
    assert_eq!(verdict.duplicates, 0, "no failure, no duplicate");
    assert!(verdict.paid > 0 && verdict.unpaid > 0, "{verdict:?}");
    if scope == Scope::Global {
        // Among the unpaid, orders after their key's deletion (phase 1's, compacted to a
        // tombstone or gone; phase 2's, followed).
        let after_deletion = script.orders_after_a_deletion();
        eprintln!("{after_deletion} orders came after their key's deletion");
        assert!(after_deletion > 0);
    }
    assert_restored(scope, &table, &hosts, &feed);
    assert_tasks_whole(scope, &hosts);
}

#[test]
fn a_compacted_table_joined_on_three_hosts_gives_every_order_its_row_as_of_its_time() {
    on_three_hosts(
        "a_compacted_table_joined_on_three_hosts",
        Scope::CoPartitioned,
    );
}

#[test]
fn a_global_table_read_whole_by_three_hosts_gives_every_order_its_latest_row() {
    on_three_hosts("a_global_table_read_whole_by_three_hosts", Scope::Global);
}

/// How a run with a kill -9 and a scale-out went.
struct Disrupted {
    verdict: Verdict,
    /// Records on the killed host's stream partitions past its last commit: what may repeat.
    bound: i64,
}

/// Three hosts under `protocol` and `guarantee`; phase 1's orders and half the rounds; kill -9
/// of host-0 while the next round's orders are processed (restarted 2 s later when `restart`);
/// two rounds more, the group settled without it; a fourth host joins while the last rounds are
/// produced.
fn kill_and_scale_out(
    test: &str,
    scope: Scope,
    protocol: &str,
    guarantee: &str,
    restart: bool,
) -> Disrupted {
    let _serial = serial();
    let dir = run_dir(test);
    let script = Script::new(base_ts());
    let partitions = scope.orders_partitions();
    let table = compacted_table(&dir, &script, partitions);
    let kafka = &table.kafka;
    let config = table_config(scope, protocol, &kafka.bootstrap, test, guarantee);
    let mut hosts = start_hosts_with(&dir, 3, &config);
    let mut feed = Feed::new(&table, &script, test, scope);
    hosts.iter().for_each(|h| feed.host_started(h));
    let t = Instant::now();
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        partitions,
        Duration::from_secs(90),
    );
    feed.phase1();
    let half = ROUNDS / 2;
    for r in 0..half {
        feed.round(r, &hosts);
    }
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("outputs before the kill", Duration::from_secs(90), |r| {
        r.len() >= 150
    });
    // The kill comes while the next round's orders are processed.
    feed.updates(half, &hosts);
    feed.orders(half);
    let killed_tasks = hosts[0].assignments().pop().expect("host-0 held tasks").0;
    hosts[0].kill9();
    let uncommitted = uncommitted(kafka, test, "orders", partitions);
    let bound: i64 = killed_tasks.iter().map(|&p| uncommitted[p as usize]).sum();
    eprintln!(
        "host-0 (tasks {killed_tasks:?}) killed after {:?}, {} outputs out; {bound} orders on its partitions past the committed processed-through",
        t.elapsed(),
        reader.records.len()
    );
    if restart {
        std::thread::sleep(Duration::from_secs(2));
        hosts[0].restart(&dir);
        feed.host_started(&hosts[0]);
    }
    feed.processed();
    for r in half + 1..half + 3 {
        feed.round(r, &hosts);
    }
    // host-0 is out of the group for good unless it was restarted.
    fn alive(hosts: &[HostProcess], restart: bool) -> Vec<&HostProcess> {
        hosts[usize::from(!restart)..].iter().collect()
    }
    wait_for_stable_group(&alive(&hosts, restart), partitions, Duration::from_secs(90));
    eprintln!("group settled after the kill ({:?})", t.elapsed());
    hosts.push(HostProcess::start(&dir, "host-3", &config));
    feed.host_started(&hosts[3]);
    for r in half + 3..ROUNDS {
        feed.round(r, &hosts);
    }
    wait_for_stable_group(&alive(&hosts, restart), partitions, Duration::from_secs(90));
    eprintln!("group settled after the scale-out ({:?})", t.elapsed());

    let settle = Duration::from_secs(if guarantee == "exactly-once" { 5 } else { 3 });
    let verdict = read_verdict(kafka, &script, scope, settle);
    eprintln!(
        "{test}: {}, bound {bound} ({:?})",
        verdict.summary(),
        t.elapsed()
    );
    table.assert_phase2_intact();
    assert!(
        verdict.complete(),
        "{verdict:?}\n{}",
        post_mortem(kafka, &hosts)
    );
    assert_restored(scope, &table, &hosts, &feed);
    assert_tasks_whole(scope, &hosts);
    for h in &hosts {
        assert!(
            h.tasks_started_unpaired().is_empty(),
            "{} started a task without its partitions",
            h.name
        );
    }
    Disrupted { verdict, bound }
}

/// At least once: nothing lost, every row right, duplicates within what the killed host
/// processed since its last commit.
fn assert_within_bound(run: &Disrupted) {
    assert!(
        run.verdict.duplicates as i64 <= run.bound,
        "{} duplicates, more than the {} orders processed since the last commit: {:?}",
        run.verdict.duplicates,
        run.bound,
        run.verdict
    );
}

#[test]
fn a_table_join_through_a_kill_and_a_scale_out_loses_no_order_and_keeps_every_row_right() {
    assert_within_bound(&kill_and_scale_out(
        "table_join_kill_and_scale_out",
        Scope::CoPartitioned,
        "consumer",
        "at-least-once",
        false,
    ));
}

#[test]
fn a_global_table_join_through_a_kill_and_a_scale_out_loses_no_order_and_keeps_every_row_right() {
    assert_within_bound(&kill_and_scale_out(
        "global_table_join_kill_and_scale_out",
        Scope::Global,
        "consumer",
        "at-least-once",
        false,
    ));
}

#[test]
fn a_table_join_exactly_once_through_a_kill_and_a_scale_out_repeats_nothing() {
    let run = kill_and_scale_out(
        "table_join_exactly_once_kill_and_scale_out",
        Scope::CoPartitioned,
        "classic",
        "exactly-once",
        true,
    );
    // The reader is read_committed: an aborted transaction's outputs never show.
    assert_eq!(run.verdict.duplicates, 0, "{:?}", run.verdict);
}

#[test]
fn a_global_table_join_exactly_once_through_a_kill_and_a_restart_repeats_nothing() {
    let run = kill_and_scale_out(
        "global_table_join_exactly_once_kill_and_restart",
        Scope::Global,
        "classic",
        "exactly-once",
        true,
    );
    // The reader is read_committed: an aborted transaction's outputs never show.
    assert_eq!(run.verdict.duplicates, 0, "{:?}", run.verdict);
}
