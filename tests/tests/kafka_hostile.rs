//! What a hostile plugin can do to a host on Apache Kafka (issue 12): outputs the producer or the
//! broker refuses, outputs to topics that do not exist or to the join's own inputs, and a call
//! that sleeps for an hour. Each must end as a dead letter saying why, and the host must go on.

use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{join_broker, run_dir, serial, PARTITIONS};
use cojoin_e2e::stream::{self, Record};
use cojoin_e2e::{cojoin, plugin};

fn pairs(keys: &[String], ts0: i64) -> Vec<Record> {
    let mut records = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let ts = ts0 + i as i64 * 10;
        for (topic, dt) in [("orders", 0), ("payments", 5)] {
            records.push(Record {
                topic,
                key: key.clone(),
                value: "{}".into(),
                timestamp: ts + dt,
            });
        }
    }
    records
}

#[test]
fn refused_outputs_and_endless_sleeps_are_dead_lettered_and_the_host_goes_on() {
    let _serial = serial();
    let dir = run_dir("refused_outputs_and_endless_sleeps_are_dead_lettered_and_the_host_goes_on");
    let kafka = Kafka::start(&dir);
    // Kafka 4 refuses records stamped over an hour ahead (log.message.timestamp.after.max.ms);
    // older brokers, and topics that raise it, take them: this one does.
    let anytime = i64::MAX.to_string();
    kafka.create_topic_with(
        "orders",
        PARTITIONS,
        &[("message.timestamp.after.max.ms", &anytime)],
    );
    kafka.create_topic("payments", PARTITIONS);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    // The broker refuses any batch over 200 bytes on this topic.
    kafka.create_topic_with("small", 1, &[("max.message.bytes", "200")]);
    let misbehave = plugin("misbehave.wasm");

    // A missing output topic: run refuses to start and check says so, both naming the field.
    let missing = join_config(&kafka.bootstrap, "missing", &misbehave, "inner")
        .replace("topic = \"orders-paid\"", "topic = \"no-such-output\"");
    let mut host = HostProcess::start(&dir, "missing", &missing);
    let (status, log) = host.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("output.topic \"no-such-output\" does not exist on the broker"),
        "{log}"
    );
    let out = cojoin(&[
        "check",
        "--config",
        dir.join("missing.toml").to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("PROBLEM: output.topic \"no-such-output\" does not exist"),
        "{stdout}"
    );

    let config = join_config(&kafka.bootstrap, "hostile", &misbehave, "inner");
    let mut host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));

    // The misbehave fixture answers "ok <key>" to the default topic, except: giant… returns 2 MB
    // (over the producer's 1 MB message.max.bytes), to:<topic>:… writes to <topic>, sleep<N>-…
    // sleeps N seconds.
    let padding = "x".repeat(300);
    let mut keys = Vec::new();
    for i in 0..6 {
        keys.push(format!("giant-{i}"));
        keys.push(format!("to:nowhere:{i}"));
        keys.push(format!("to:orders:{i}"));
        keys.push(format!("to:small:{i}-{padding}"));
        keys.push(format!("sleep3600-{i}"));
        keys.push(format!("ok-{i}"));
    }
    let producer = kafka.producer("murmur2_random");
    let started = Instant::now();
    // One order stamped in the year 3000 in partition 0, then pairs in that partition: before
    // join.max_future it moved stream time past every window, and every later record of the task
    // was late, across restarts.
    let year_3000 = 32_503_680_000_000;
    let future = Record {
        topic: "orders",
        key: "future-1".into(),
        value: "{}".into(),
        timestamp: year_3000,
    };
    kafka.produce(&producer, &[future], Some(0));
    let p0: Vec<String> = (0..3).map(|i| format!("ok-p0-{i}")).collect();
    kafka.produce(&producer, &pairs(&p0, stream::BASE_TS), Some(0));
    kafka.produce(&producer, &pairs(&keys, stream::BASE_TS), None);

    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until("9 ok outputs", Duration::from_secs(60), |r| r.len() >= 9);
    eprintln!("ok outputs after {:?}", started.elapsed());
    let mut dlq = kafka.reader("dlq", 1);
    // Five hostile kinds, six keys each, two inputs per match; and the far-future order.
    let dead = dlq
        .read_until("61 dead letters", Duration::from_secs(60), |r| {
            r.len() >= 61
        })
        .to_vec();
    let took = started.elapsed();
    // Before: one giant output stopped the host for good (exit 2, nothing committed), and each
    // hour-long sleep held every task of the host for as long as it slept.
    assert!(took < Duration::from_secs(20), "took {took:?}");

    let of =
        |prefix: &str| -> Vec<_> { dead.iter().filter(|r| r.key.starts_with(prefix)).collect() };
    let expect = |prefix: &str, kind: &str, says: &str| {
        let keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
        assert!(dead.len() == 61, "{} dead letters: {keys:?}", dead.len());
        let records = of(prefix);
        assert_eq!(records.len(), 12, "{prefix}: {records:?}");
        for r in records {
            assert_eq!(r.header("cojoin.error.kind"), Some(kind), "{r:?}");
            let message = r.header("cojoin.error.message").unwrap_or_default();
            assert!(message.contains(says), "{prefix}: {message}");
            assert!(r.header("cojoin.source.offset").is_some(), "{r:?}");
        }
        eprintln!(
            "{prefix}: {kind}: {}",
            of(prefix)[0].header("cojoin.error.message").unwrap()
        );
    };
    expect("giant-", "output-refused", "too large");
    expect(
        "to:nowhere:",
        "output-refused",
        "\"nowhere\" does not exist",
    );
    expect(
        "to:orders:",
        "output-refused",
        "an input topic of this join",
    );
    expect("to:small:", "output-refused", "too large");
    expect("sleep3600-", "timeout", "asked to wait 3600s");
    let future = of("future-");
    assert_eq!(future.len(), 1, "{future:?}");
    assert_eq!(
        future[0].header("cojoin.error.kind"),
        Some("future-timestamp")
    );
    // The inputs kept their values: a dead letter can be replayed.
    assert!(dead.iter().all(|r| r.value == "{}"), "{dead:?}");

    // The tasks go on: later records are joined as before, in partition 0 too.
    let later: Vec<String> = (10..16).map(|i| format!("ok-{i}")).collect();
    kafka.produce(&producer, &pairs(&later, stream::BASE_TS + 1_000), None);
    let p0_later: Vec<String> = (3..6).map(|i| format!("ok-p0-{i}")).collect();
    kafka.produce(
        &producer,
        &pairs(&p0_later, stream::BASE_TS + 1_000),
        Some(0),
    );
    let outputs_now = outputs
        .read_until("18 ok outputs", Duration::from_secs(60), |r| r.len() >= 18)
        .to_vec();
    let mut values: Vec<&str> = outputs_now.iter().map(|r| r.value.as_str()).collect();
    values.sort_unstable();
    values.dedup();
    assert_eq!(values.len(), 18, "{values:?}");
    assert!(values.iter().all(|v| v.starts_with("ok ok-")), "{values:?}");
    let url = format!("{}/metrics", host.admin_url(Duration::from_secs(10)));
    let metrics = cojoin_e2e::http::get(&url).body;
    let refused = cojoin_e2e::http::sample(&metrics, "cojoin_refused_outputs_total");
    assert_eq!(refused, Some(24.0), "{metrics}");

    // SIGTERM is obeyed at once: no call is left sleeping.
    let stopping = Instant::now();
    host.terminate();
    let (status, log) = host.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{log}");
    let stopped = stopping.elapsed();

    // After a restart, partition 0 (its commit was never pinned on the year-3000 record) joins.
    host.restart(&dir);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));
    let p0_restart: Vec<String> = (6..9).map(|i| format!("ok-p0-{i}")).collect();
    kafka.produce(
        &producer,
        &pairs(&p0_restart, stream::BASE_TS + 2_000),
        Some(0),
    );
    let after = outputs
        .read_until(
            "the restarted host's outputs",
            Duration::from_secs(60),
            |r| {
                p0_restart
                    .iter()
                    .all(|k| r.iter().any(|o| o.value == format!("ok {k}")))
            },
        )
        .to_vec();
    let repeated = after.len() - 18 - p0_restart.len();
    eprintln!(
        "hostile records dead-lettered in {took:?}; SIGTERM to exit {stopped:?}; outputs repeated after the restart: {repeated}"
    );
}

/// Under exactly-once, an output the broker refuses dooms its transaction: it is aborted, and the
/// replay dead-letters that output's inputs instead of sending it again (else every replay would
/// abort again; refused outputs that fell in two rounds abort two transactions). A read_committed reader sees the other outputs once and the dead letters once.
/// A key over the broker's 1 MB limit: its output is refused, its dead letter is refused, and so is
/// the dead letter without its value (the key alone is too large). Before, the host exited with
/// code 2 on every restart; now the dead letter goes without the key too, carrying its digest.
#[test]
fn an_input_key_over_a_megabyte_is_dead_lettered_without_it_and_the_host_goes_on() {
    let _serial = serial();
    let dir =
        run_dir("an_input_key_over_a_megabyte_is_dead_lettered_without_it_and_the_host_goes_on");
    let kafka = Kafka::start(&dir);
    // The inputs take records up to 4 MB; the output and dead-letter topics keep the 1 MB default.
    for topic in ["orders", "payments"] {
        kafka.create_topic_with(topic, PARTITIONS, &[("max.message.bytes", "4000000")]);
    }
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    let config = join_config(
        &kafka.bootstrap,
        "giant-key",
        &plugin("misbehave.wasm"),
        "inner",
    );
    let mut host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));
    let producer = Kafka::producer_with(
        &kafka.bootstrap,
        "murmur2_random",
        &[("message.max.bytes".to_owned(), "4000000".to_owned())],
    );
    let giant = format!("ok-giant-{}", "k".repeat(1_200_000));
    kafka.produce(
        &producer,
        &pairs(std::slice::from_ref(&giant), stream::BASE_TS),
        None,
    );
    let mut dlq = kafka.reader("dlq", 1);
    let dead = dlq
        .read_until(
            "the giant pair's two dead letters",
            Duration::from_secs(60),
            |r| r.len() >= 2,
        )
        .to_vec();
    let digest = format!(
        "{:x}",
        <sha2::Sha256 as sha2::Digest>::digest(giant.as_bytes())
    );
    for r in &dead {
        assert_eq!(
            r.header("cojoin.error.kind"),
            Some("output-refused"),
            "{:?}",
            r.headers
        );
        assert_eq!(r.key, "", "the key is left out");
        assert_eq!(
            r.header("cojoin.key.sha256"),
            Some(digest.as_str()),
            "{:?}",
            r.headers
        );
        assert!(
            r.header("cojoin.source.sizes")
                .is_some_and(|s| s.starts_with("key 1200009 bytes")),
            "{:?}",
            r.headers
        );
        assert!(
            r.header("cojoin.source.offset").is_some(),
            "{:?}",
            r.headers
        );
    }
    // The host goes on: later pairs are joined.
    let later: Vec<String> = (0..6).map(|i| format!("ok-{i}")).collect();
    kafka.produce(&producer, &pairs(&later, stream::BASE_TS + 1_000), None);
    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until(
        "6 outputs after the giant key",
        Duration::from_secs(60),
        |r| r.len() >= 6,
    );
    assert!(host.is_running(), "{}", host.log_text());
}

#[test]
fn under_exactly_once_an_output_the_broker_refuses_is_dead_lettered_after_an_abort() {
    let _serial = serial();
    let dir =
        run_dir("under_exactly_once_an_output_the_broker_refuses_is_dead_lettered_after_an_abort");
    let kafka = join_broker(&dir);
    // A batch over 400 bytes is refused whole: one 600-byte output sinks its companions.
    kafka.create_topic_with("small", 1, &[("max.message.bytes", "400")]);
    let config = join_config(
        &kafka.bootstrap,
        "eos-hostile",
        &plugin("misbehave.wasm"),
        "inner",
    )
    .replace("[output]\n", "[output]\nguarantee = \"exactly-once\"\n");
    let host = HostProcess::start(&dir, "host", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(60));
    let padding = "x".repeat(300);
    let mut keys: Vec<String> = (0..3).map(|i| format!("to:small:{i}-{padding}")).collect();
    // Small outputs to the same topic partition, made in the same round: they share produce
    // requests with the large ones (before, 11 of 13 such were dead-lettered with them).
    keys.extend((0..3).map(|i| format!("to:small:s{i}")));
    keys.extend((0..3).map(|i| format!("ok-{i}")));
    kafka.produce(
        &kafka.producer("murmur2_random"),
        &pairs(&keys, stream::BASE_TS),
        None,
    );

    let mut dlq = kafka.reader("dlq", 1);
    dlq.read_until("6 dead letters", Duration::from_secs(60), |r| r.len() >= 6);
    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until("3 ok outputs", Duration::from_secs(60), |r| r.len() >= 3);
    let mut small = kafka.reader("small", 1);
    small.read_until("3 small outputs", Duration::from_secs(60), |r| r.len() >= 3);
    let (dead, ok, small) = (
        dlq.read_for(Duration::from_secs(3)).to_vec(),
        outputs.read_for(Duration::ZERO).to_vec(),
        small.read_for(Duration::ZERO).to_vec(),
    );
    let page = cojoin_e2e::http::get(&format!(
        "{}/metrics",
        host.admin_url(Duration::from_secs(5))
    ))
    .body;
    let aborted = cojoin_e2e::http::sample(&page, "cojoin_transactions_aborted_total");
    eprintln!(
        "exactly-once, refused output: {} dead letters ({:?}), {} outputs, transactions aborted {aborted:?}",
        dead.len(),
        dead.first().and_then(|r| r.header("cojoin.error.message")),
        ok.len()
    );
    let dead_keys: Vec<&str> = dead.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(dead.len(), 6, "{dead_keys:?}");
    assert!(
        dead_keys.iter().all(|k| k.contains(&padding)),
        "{dead_keys:?}"
    );
    let mut small: Vec<&str> = small.iter().map(|r| r.value.as_str()).collect();
    small.sort_unstable();
    assert_eq!(
        small,
        ["ok to:small:s0", "ok to:small:s1", "ok to:small:s2"]
    );
    assert!(
        dead.iter()
            .all(|r| r.header("cojoin.error.kind") == Some("output-refused")),
        "{dead:?}"
    );
    assert_eq!(ok.len(), 3, "{ok:?}");
    assert!(aborted.is_some_and(|n| n >= 1.0), "{page}");
}
