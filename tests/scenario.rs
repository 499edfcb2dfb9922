//! The orders/payments left join on kafka, as the broker suites set it up: a fresh broker per test
//! with both topics, host processes in one group, the per-partition ticks that close every window,
//! and the outcomes read back and tallied.

use std::sync::Mutex;

use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};
use std::time::Duration;

use crate::broker::{Kafka, ReadRecord, Reader};
use crate::hosts::{join_config, HostProcess};
use crate::plugin;
use crate::stream::{self, Record, Tally};

pub const PARTITIONS: i32 = 6;

/// The tests share two cores: one broker and its hosts at a time keeps the timings sane.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh directory per test under target/e2e-runs/, kept afterwards: broker and host logs for
/// a failure's post-mortem.
pub fn run_dir(test: &str) -> std::path::PathBuf {
    let dir = crate::root().join("target/e2e-runs").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    eprintln!("logs in {dir:?}");
    dir
}

pub fn join_broker(dir: &std::path::Path) -> Kafka {
    join_broker_with(dir, "")
}

/// [`join_broker`] with broker `settings` (`key=value` lines).
pub fn join_broker_with(dir: &std::path::Path, settings: &str) -> Kafka {
    let kafka = Kafka::start_with(dir, settings);
    kafka.create_topic("orders", PARTITIONS);
    kafka.create_topic("payments", PARTITIONS);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    kafka
}

/// Produces one payment per partition far ahead in event time: stream time passes every window,
/// so the unpaid orders expire.
pub fn close_windows(kafka: &Kafka, producer: &ThreadedProducer<DefaultProducerContext>) {
    for p in 0..PARTITIONS {
        let tick = Record {
            topic: "payments",
            key: format!("tick-{p}"),
            value: "{}".into(),
            timestamp: stream::BASE_TS + 10_000_000,
        };
        kafka.produce(producer, &[tick], Some(p));
    }
}

pub fn order_outputs(records: &[ReadRecord]) -> Vec<(String, String)> {
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

/// `n` hosts of the left join in group `group`, with the Rust order-paid plugin.
pub fn start_hosts(
    dir: &std::path::Path,
    kafka: &Kafka,
    group: &str,
    n: usize,
) -> Vec<HostProcess> {
    let config = join_config(
        &kafka.bootstrap,
        group,
        &plugin("order_paid_rust.wasm"),
        "left",
    );
    start_hosts_with(dir, n, &config)
}

/// `n` hosts, host-0 to host-{n-1}, all with `config`.
#[must_use = "dropping the hosts kills them"]
pub fn start_hosts_with(dir: &std::path::Path, n: usize, config: &str) -> Vec<HostProcess> {
    (0..n)
        .map(|i| HostProcess::start(dir, &format!("host-{i}"), config))
        .collect()
}

/// Every host's every assignment held the same partition numbers of both topics.
pub fn assert_co_partitioned(hosts: &[HostProcess]) {
    for h in hosts {
        let assignments = h.assignments();
        assert!(
            !assignments.is_empty(),
            "{} logged no assignment:\n{}",
            h.name,
            h.log_text()
        );
        for (left, right) in &assignments {
            assert_eq!(
                left, right,
                "{}: orders {left:?} vs payments {right:?}",
                h.name
            );
        }
        eprintln!("{}: assignments {assignments:?}", h.name);
    }
}

/// Reads outputs until every expected outcome is there (or 120 s pass), then 3 s more for
/// stragglers; the tally, which names what is missing if anything is.
pub fn read_all_outcomes(
    kafka: &Kafka,
    expected: &std::collections::BTreeMap<String, &'static str>,
) -> Tally {
    let mut reader = kafka.reader("orders-paid", 1);
    tally_once_complete(
        &mut reader,
        expected,
        Duration::from_secs(120),
        Duration::from_secs(3),
    )
}

/// Reads on with `reader` until every expected outcome is there (or `timeout` passes), then
/// `settle` more for duplicates; the tally of everything it read.
pub fn tally_once_complete(
    reader: &mut Reader,
    expected: &std::collections::BTreeMap<String, &'static str>,
    timeout: Duration,
    settle: Duration,
) -> Tally {
    reader.read_while_not(timeout, |r| {
        Tally::of(expected, &order_outputs(r)).missing.is_empty()
    });
    Tally::of(expected, &order_outputs(reader.read_for(settle)))
}

/// What each host and the dead-letter topic say, for a failure message: the hosts' counters from
/// `/metrics` and the keys that were dead-lettered (with why).
pub fn post_mortem(kafka: &Kafka, hosts: &[HostProcess]) -> String {
    let mut out = String::new();
    for h in hosts {
        // A host killed on purpose answers nothing; its log is in the run's directory.
        if !h.is_started() {
            out.push_str(&format!("{}: not running\n", h.name));
            continue;
        }
        let url = h.admin_url(Duration::from_secs(1));
        let page = crate::http::get(&format!("{url}/metrics")).body;
        let counters: Vec<String> = page
            .lines()
            .filter(|l| !l.starts_with('#') && l.starts_with("cojoin_") && l.contains("_total"))
            .map(str::to_owned)
            .collect();
        out.push_str(&format!("{}: {}\n", h.name, counters.join(", ")));
    }
    // What the hosts warned of (an end offset not given, a consumer error) says why a record
    // came late or went missing when the run's directory is gone (CI keeps only this output).
    for h in hosts {
        let log = h.log_text();
        let warned: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
            .collect();
        let from = warned.len().saturating_sub(30);
        out.push_str(&format!(
            "{} warned {} times, the last {}:\n{}\n",
            h.name,
            warned.len(),
            warned.len() - from,
            warned[from..].join("\n")
        ));
    }
    let mut dlq = kafka.reader("dlq", 1);
    let dead: Vec<String> = dlq
        .read_for(Duration::from_secs(2))
        .iter()
        .map(|r| {
            format!(
                "{} ({})",
                r.key,
                r.header("cojoin.error.kind").unwrap_or("?")
            )
        })
        .collect();
    out.push_str(&format!("dead letters: {dead:?}\n"));
    out
}

/// Records on `tasks`' partitions of `topics` past what `group` last committed as processed
/// (see [`uncommitted`]): at most that many records were processed since the last commit, and
/// only their outcomes may repeat. Each record of this stream takes part in at most one match,
/// and the expiries its stream time closes are fewer than the records in between, so duplicates
/// of outcomes stay within it.
pub fn records_past_last_commit(kafka: &Kafka, group: &str, topics: &[&str], tasks: &[i32]) -> i64 {
    let mut past = 0;
    for &topic in topics {
        let uncommitted = uncommitted(kafka, group, topic, PARTITIONS);
        past += tasks.iter().map(|&p| uncommitted[p as usize]).sum::<i64>();
    }
    past
}

/// Per partition of `topic` (of `partitions`): its records past what `group` last committed as
/// processed — the processed-through of the commit metadata, else the committed offset.
pub fn uncommitted(kafka: &Kafka, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let ends = kafka.end_offsets(topic, partitions);
    let committed = kafka.committed(group, topic, partitions);
    (ends.iter().zip(&committed))
        .map(|(end, (offset, metadata))| {
            let first_new = metadata
                .strip_prefix("cojoin/1 processed-through=")
                .and_then(|n| n.parse::<i64>().ok())
                .map(|through| through + 1)
                .unwrap_or((*offset).max(0));
            (end - first_new).max(0)
        })
        .collect()
}
