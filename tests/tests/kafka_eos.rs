//! Exactly-once on Apache Kafka: three hosts with `output.guarantee = "exactly-once"`, a stream
//! with a known expected set, and kill -9 of a host mid-stream (restarted 2 s later), repeated
//! (COJOIN_EOS_KILLS, default 1; `make soak` runs 5). A `read_committed` reader of the output must
//! see every expected match and expiry exactly once.

use std::time::{Duration, Instant};

use cojoin_e2e::hosts::{join_config, wait_for_stable_group};
use cojoin_e2e::plugin;
use cojoin_e2e::scenario::{
    close_windows, join_broker, post_mortem, run_dir, serial, start_hosts_with,
    tally_once_complete, PARTITIONS,
};
use cojoin_e2e::stream::{self, Tally};

const ORDERS: u32 = 1200;

fn kills() -> u32 {
    std::env::var("COJOIN_EOS_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Kills hosts mid-stream under `guarantee`; what a read_committed reader got.
fn kill_rounds(guarantee: &str) -> Tally {
    kill_rounds_with(guarantee, "order_paid_rust.wasm")
}

/// [`kill_rounds`] with the plugin `file`.
fn kill_rounds_with(guarantee: &str, file: &str) -> Tally {
    let _serial = serial();
    let dir = run_dir(&format!("kill_rounds_{guarantee}_{file}"));
    let kafka = join_broker(&dir);
    let config = join_config(&kafka.bootstrap, "eos", &plugin(file), "left").replace(
        "[output]\n",
        &format!("[output]\nguarantee = \"{guarantee}\"\n"),
    );
    let mut hosts = start_hosts_with(&dir, 3, &config);
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let t = Instant::now();
    let producer = kafka.producer("murmur2_random");
    let mut reader = kafka.reader("orders-paid", 1);
    let rounds = kills();
    let chunk = ORDERS / (rounds + 1);
    for round in 0..rounds {
        kafka.produce(
            &producer,
            &stream::orders(round * chunk, (round + 1) * chunk),
            None,
        );
        // Mid-stream: some of this chunk's outcomes are out (committed), so every host has
        // transactions behind it and one open.
        let want = (round * chunk + chunk / 2) as usize;
        reader.read_until("outcomes before the kill", Duration::from_secs(90), |r| {
            r.len() >= want
        });
        let victim = (round % 3) as usize;
        hosts[victim].kill9();
        std::thread::sleep(Duration::from_secs(2));
        hosts[victim].restart(&dir);
        eprintln!(
            "round {round}: host-{victim} killed and restarted after {:?}",
            t.elapsed()
        );
    }
    kafka.produce(&producer, &stream::orders(rounds * chunk, ORDERS), None);
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    close_windows(&kafka, &producer);

    let expected = stream::expected(ORDERS);
    // A duplicate would come within a commit interval or two of the last outcome.
    let tally = tally_once_complete(
        &mut reader,
        &expected,
        Duration::from_secs(180),
        Duration::from_secs(5),
    );
    eprintln!(
        "{guarantee}, {rounds} kill -9 round(s) of 3 hosts: events {}, matches {}, expiries {}, outputs {}, duplicates {}, missing {} ({:?})",
        stream::orders(0, ORDERS).len(),
        tally.matches,
        tally.expiries,
        tally.outputs,
        tally.duplicates,
        tally.missing.len(),
        t.elapsed()
    );
    assert!(
        tally.complete(),
        "{tally:?}\n{}",
        post_mortem(&kafka, &hosts)
    );
    assert_eq!((tally.matches, tally.expiries), (900, 300));
    tally
}

#[test]
fn exactly_once_hosts_killed_mid_stream_lose_nothing_and_repeat_nothing() {
    let tally = kill_rounds("exactly-once");
    assert_eq!(tally.duplicates, 0, "{tally:?}");
}

/// The same with the Python plugin, whose calls the host makes in batches (`on-batch`): a kill
/// in the middle of a batch, and the batches' deferred outputs, change nothing.
#[test]
fn exactly_once_with_batched_python_calls_hosts_killed_lose_nothing_and_repeat_nothing() {
    let tally = kill_rounds_with("exactly-once", "order_paid_python.wasm");
    assert_eq!(tally.duplicates, 0, "{tally:?}");
}

/// The contrast: the same kills at least once lose nothing but repeat what ran since the last
/// commit (printed; how many depends on where the kill falls).
#[test]
fn at_least_once_hosts_killed_mid_stream_lose_nothing() {
    kill_rounds("at-least-once");
}

/// A zombie: host-0 is stopped (SIGSTOP) until the group has given its tasks to the others, the
/// stream goes on, then it is continued. Whatever it does after the move — finish its round,
/// produce, commit — must not become visible: its transaction is fenced (KIP-447: its offsets
/// carry a stale generation; or the broker aborted it on its timeout and bumped the epoch).
#[test]
fn a_zombie_host_continued_after_its_tasks_moved_makes_nothing_visible() {
    let _serial = serial();
    let dir = run_dir("a_zombie_host_continued_after_its_tasks_moved_makes_nothing_visible");
    let kafka = join_broker(&dir);
    let config = join_config(
        &kafka.bootstrap,
        "zombie",
        &plugin("order_paid_rust.wasm"),
        "left",
    )
    .replace("[output]\n", "[output]\nguarantee = \"exactly-once\"\n");
    let mut hosts = start_hosts_with(&dir, 2, &config);
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let producer = kafka.producer("murmur2_random");
    let mut reader = kafka.reader("orders-paid", 1);
    kafka.produce(&producer, &stream::orders(0, 400), None);
    reader.read_until("outcomes before the stop", Duration::from_secs(90), |r| {
        r.len() >= 150
    });

    hosts[0].signal("STOP");
    // host-1 takes every task once host-0's session times out.
    wait_for_stable_group(&[&hosts[1]], PARTITIONS, Duration::from_secs(90));
    kafka.produce(&producer, &stream::orders(400, 800), None);
    reader.read_until(
        "outcomes while host-0 is stopped",
        Duration::from_secs(90),
        |r| r.len() >= 450,
    );
    hosts[0].signal("CONT");
    let t = Instant::now();
    kafka.produce(&producer, &stream::orders(800, ORDERS), None);
    // host-0 either rejoins (its tasks' offsets refused, its transaction aborted) or stops
    // (its producer fenced); the outcomes are read until complete either way.
    close_windows(&kafka, &producer);
    let expected = stream::expected(ORDERS);
    let tally = tally_once_complete(
        &mut reader,
        &expected,
        Duration::from_secs(180),
        Duration::from_secs(5),
    );
    let fate = match hosts[0].exited() {
        Some(status) => format!("exited ({status}) after {:?}", t.elapsed()),
        None => "rejoined the group".to_owned(),
    };
    let log = hosts[0].log_text();
    let fenced = log
        .lines()
        .filter(|l| l.contains("fenced") || l.contains("transaction aborted"))
        .count();
    eprintln!(
        "zombie: host-0 continued after its tasks moved, then {fate}; {fenced} fenced/aborted lines in its log; matches {}, expiries {}, duplicates {}, missing {}",
        tally.matches,
        tally.expiries,
        tally.duplicates,
        tally.missing.len()
    );
    assert!(
        tally.complete(),
        "{tally:?}\n{}",
        post_mortem(&kafka, &hosts[1..])
    );
    assert_eq!(tally.duplicates, 0, "{tally:?}\n{log}");
}

/// Orders and payments `nap-0..nap-n` (order `i` at `i` s, its payment 2 s later, every fourth
/// unpaid) for the misbehave fixture, whose every call on a `nap` key takes 20 ms.
fn nap_stream(n: i64) -> Vec<stream::Record> {
    (0..n)
        .flat_map(|i| {
            let key = format!("nap-{i}");
            let ts = stream::BASE_TS + i * 1000;
            let order = stream::Record {
                topic: "orders",
                key: key.clone(),
                value: "{}".into(),
                timestamp: ts,
            };
            let payment = (i % 4 != 0).then(|| stream::Record {
                topic: "payments",
                key,
                value: "{}".into(),
                timestamp: ts + 2000,
            });
            std::iter::once(order).chain(payment)
        })
        .collect()
}

/// How many times each nap order's one outcome (a match, or its expiry: `ok <key>`) was read.
fn naps(r: &[cojoin_e2e::broker::ReadRecord]) -> std::collections::HashMap<String, usize> {
    let mut seen = std::collections::HashMap::new();
    for key in r.iter().filter_map(|r| r.value.strip_prefix("ok nap-")) {
        *seen.entry(key.to_owned()).or_insert(0) += 1;
    }
    seen
}

/// A rebalance while the workers run long parallel rounds and the run loop polls ahead
/// (host/src/kafka/intake/ahead.rs): a backlog whose every call takes 20 ms (the misbehave fixture's
/// `nap` keys), one host, then a second joins mid-backlog (the classic protocol: every task of
/// the first is revoked, most likely mid-round). A revoked task's batch in flight must be
/// neither delivered nor committed: a read_committed reader sees every outcome exactly once.
#[test]
fn exactly_once_a_rebalance_during_parallel_rounds_loses_and_repeats_nothing() {
    const NAPS: i64 = 900;
    let _serial = serial();
    let dir = run_dir("exactly_once_a_rebalance_during_parallel_rounds");
    let kafka = join_broker(&dir);
    let config = join_config(
        &kafka.bootstrap,
        "eos-ahead",
        &plugin("misbehave.wasm"),
        "left",
    )
    .replace("[output]\n", "[output]\nguarantee = \"exactly-once\"\n");
    let first = cojoin_e2e::hosts::HostProcess::start(&dir, "host-0", &config);
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &nap_stream(NAPS), None);
    close_windows(&kafka, &producer);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("the first outcomes", Duration::from_secs(90), |r| {
        naps(r).len() >= 40
    });
    let mut second = cojoin_e2e::hosts::HostProcess::start(&dir, "host-1", &config);
    // Each join of host-1 revokes every task of host-0, most likely mid-round; on a busy machine
    // one can land between rounds (a transaction's commit), so host-1 leaves and joins again, up
    // to three joins, while the backlog lasts.
    let mid_round = |h: &cojoin_e2e::hosts::HostProcess| {
        h.log_text()
            .matches("partitions revoked during a round")
            .count()
    };
    // Host-1 is in the group once this run of it holds tasks: host-0's were revoked by then
    // (eager), and host-1 handles SIGTERM (its handler is set before it joins). The last run's
    // holdings would not do: under two CPU hogs a restarted host-1 got its SIGTERM before it
    // had set its handler, and died of it.
    let in_group = |h: &cojoin_e2e::hosts::HostProcess| {
        h.held_in_this_run()
            .is_some_and(|(left, _)| !left.is_empty())
    };
    for joins in 1..=3 {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !in_group(&second) {
            assert!(Instant::now() < deadline, "host-1 never joined");
            reader.read_for(Duration::from_millis(100));
        }
        if mid_round(&first) > 0 || joins == 3 || naps(reader.read_for(Duration::ZERO)).len() > 600
        {
            break;
        }
        second.terminate();
        let (status, _) = second.wait_exit(Duration::from_secs(60));
        assert!(status.success(), "host-1 after SIGTERM: {status}");
        second.restart(&dir);
    }
    let hosts = [first, second];
    reader.read_until("every outcome", Duration::from_secs(180), |r| {
        naps(r).len() >= NAPS as usize
    });
    // Any duplicate would come within a few commit intervals of the last outcome.
    let seen = naps(reader.read_for(Duration::from_secs(5)));
    let repeated: Vec<(&String, &usize)> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let log = hosts[0].log_text();
    let revokes = log.matches("partitions revoked").count();
    let mid_round = log.matches("partitions revoked during a round").count();
    eprintln!(
        "exactly-once, a host joining mid-backlog: {} outcomes of {NAPS}, {} repeated, {revokes} revoke(s) on host-0, {mid_round} during a round",
        seen.len(),
        repeated.len()
    );
    assert_eq!(seen.len(), NAPS as usize, "{}", post_mortem(&kafka, &hosts));
    assert!(repeated.is_empty(), "repeated: {repeated:?}");
    assert!(revokes > 0, "host-0 never lost a task:\n{log}");
    // What this test is for: the revoke came while a round ran (a gap between two rounds is
    // a few ms against rounds of hundreds).
    assert!(mid_round > 0, "no revoke came during a round:\n{log}");
}

/// Issue 29 item 5: a routine broker restart, away longer than the hosts' 10 s transaction
/// timeout, while two exactly-once hosts work through a backlog (every call 20 ms: transactions
/// open, outputs in flight when it stops). The broker aborts the transactions it finds timed out
/// when it is back (checked every second here, every 10 s by default) and fences their
/// producers; the consumers must be polled meanwhile (`max.poll.interval.ms` 10 s). The hosts
/// must ride it out — no exit, no member leaving the group, every outcome once for a
/// read_committed reader.
#[test]
fn exactly_once_hosts_ride_out_a_broker_restart_longer_than_the_transaction_timeout() {
    let rode = ride_out_a_broker_restart("exactly-once");
    assert_eq!(rode.repeated, 0, "outcomes read more than once");
}

/// [`exactly_once_hosts_ride_out_a_broker_restart_longer_than_the_transaction_timeout`] at least
/// once: the hosts kept polling, so none left the group (before, they left and rejoined,
/// repeating what they had not committed).
#[test]
fn at_least_once_hosts_ride_out_a_broker_restart_without_leaving_the_group() {
    ride_out_a_broker_restart("at-least-once");
}

struct RodeOut {
    /// Outcomes read more than once.
    repeated: usize,
}

/// Two hosts under `guarantee`, a backlog of slow calls, the broker restarted mid-way and away
/// 15 s: no host exits or leaves the group, every outcome is read.
fn ride_out_a_broker_restart(guarantee: &str) -> RodeOut {
    const NAPS: i64 = 900;
    const DOWN: Duration = Duration::from_secs(15);
    let _serial = serial();
    let dir = run_dir(&format!("broker_restart_{guarantee}"));
    let mut kafka = cojoin_e2e::scenario::join_broker_with(
        &dir,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
    );
    let config = cojoin_e2e::hosts::join_config_for(
        "consumer",
        &kafka.bootstrap,
        "restart",
        &plugin("misbehave.wasm"),
        "left",
    )
    .replace(
        "[output]\n",
        &format!("[output]\nguarantee = \"{guarantee}\"\n"),
    );
    let mut hosts = start_hosts_with(&dir, 2, &config);
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let t = Instant::now();
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &nap_stream(NAPS), None);
    close_windows(&kafka, &producer);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until(
        "outcomes before the restart",
        Duration::from_secs(90),
        |r| naps(r).len() >= 100,
    );
    let away = kafka.restart(DOWN);
    eprintln!(
        "the broker restarted after {:?}, away {away:?}",
        t.elapsed()
    );
    reader.read_while_not(Duration::from_secs(180), |r| naps(r).len() >= NAPS as usize);
    // Any duplicate would come within a few commit intervals of the last outcome.
    let seen = naps(reader.read_for(Duration::from_secs(5)));
    let repeated = seen.values().filter(|n| **n > 1).count();
    let exited: Vec<String> = hosts
        .iter_mut()
        .filter_map(|h| (!h.is_running()).then(|| format!("{} exited:\n{}", h.name, h.log_text())))
        .collect();
    let logs: Vec<String> = hosts.iter().map(|h| h.log_text()).collect();
    let count = |what: &str| -> usize { logs.iter().map(|l| l.matches(what).count()).sum() };
    let (renewed, left) = (
        count("transactional producer renewed"),
        count("leaving group"),
    );
    let warnings = count("\"level\":\"WARN\"") + count("\"level\":\"ERROR\"");
    eprintln!(
        "{guarantee}, a broker restart away {away:?} mid-backlog: {} outcomes of {NAPS}, {repeated} repeated, hosts exited {}, left the group {left}, producers renewed {renewed}, WARN/ERROR lines {warnings} ({:?})",
        seen.len(),
        exited.len(),
        t.elapsed()
    );
    assert!(exited.is_empty(), "{}", exited.join("\n"));
    assert_eq!(
        left, 0,
        "a host left the group (not polled for max.poll.interval.ms)"
    );
    assert_eq!(seen.len(), NAPS as usize, "{}", post_mortem(&kafka, &hosts));
    RodeOut { repeated }
}

/// Issue 29 item 5: a transactional producer fenced under a running host (here by another
/// producer registering the host's transactional id, as the broker fences one whose transaction
/// it timed out) is renewed: the host goes on, its fenced transaction's outputs are never seen,
/// and every outcome is read once.
#[test]
fn exactly_once_a_fenced_producer_is_renewed_and_nothing_is_lost_or_repeated() {
    const NAPS: i64 = 300;
    let _serial = serial();
    let dir = run_dir("exactly_once_fenced_producer");
    let kafka = cojoin_e2e::scenario::join_broker(&dir);
    let config = join_config(
        &kafka.bootstrap,
        "eos-fence",
        &plugin("misbehave.wasm"),
        "left",
    )
    .replace("[kafka]\n", "[kafka]\ninstance_id = \"solo\"\n")
    .replace("[output]\n", "[output]\nguarantee = \"exactly-once\"\n");
    let mut host = cojoin_e2e::hosts::HostProcess::start(&dir, "host-0", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(90));
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &nap_stream(NAPS), None);
    close_windows(&kafka, &producer);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("outcomes before the fence", Duration::from_secs(90), |r| {
        naps(r).len() >= 50
    });
    // The host's transactional id (host/src/kafka/transaction.rs): registering it fences the
    // host's producer at its next transactional request.
    let fencer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &kafka.bootstrap)
        .set("transactional.id", "cojoin-eos-fence-solo")
        .create()
        .unwrap();
    rdkafka::producer::Producer::init_transactions(&fencer, Duration::from_secs(30)).unwrap();
    reader.read_while_not(Duration::from_secs(120), |r| naps(r).len() >= NAPS as usize);
    let seen = naps(reader.read_for(Duration::from_secs(5)));
    let repeated = seen.values().filter(|n| **n > 1).count();
    let log = host.log_text();
    let renewed = log.matches("transactional producer renewed").count();
    eprintln!(
        "exactly-once, the host's producer fenced mid-backlog: {} outcomes of {NAPS}, {repeated} repeated, producer renewed {renewed} time(s)",
        seen.len()
    );
    assert!(host.is_running(), "the host exited:\n{log}");
    assert!(renewed >= 1, "the producer was never renewed:\n{log}");
    assert_eq!(
        seen.len(),
        NAPS as usize,
        "{}",
        post_mortem(&kafka, &[host])
    );
    assert_eq!(repeated, 0, "outcomes read more than once");
}
