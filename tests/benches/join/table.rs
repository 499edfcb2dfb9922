//! The stream-table data set (BENCH_DATA=table, issue 33): its systems, the restart after each
//! run that times the table's restore, and the report's restore table and targets.
//!
//! A restore is timed on the run's own consumer group once the run has consumed the stream: for
//! cojoin, `cojoin run` again with the run's config, from its start until every task has logged
//! `task P: table customers-P restored: N records read, R rows, B bytes, in S s` (each task reads
//! its table partition from the beginning at every start); for Kafka Streams, the same
//! application id with a fresh state directory, timed by a state restore listener until the
//! instance is RUNNING (the KTable's store restored from its changelog topic, the GlobalKTable's
//! from the table's topic). Not restarted: Quix Streams, run without changelog topics
//! (quix_join.py), and Flink, run without checkpoints (its defaults): neither has anything to
//! restore from but the topics, which a restart reads again as the first run did.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cojoin_e2e::java_peer;

use super::cojoin::{spawn_cojoin, stop_cojoin};
use super::peers::data_args;
use super::summary::{median, Summary};
use super::timing::timed_json;
use super::{topics, PARTITIONS};

/// The systems of the stream-table data set, by their BENCH_SYSTEMS names, in the order they run.
pub(crate) const SYSTEMS: [&str; 12] = [
    "bare",
    "cojoin-rust",
    "cojoin-rust-latest",
    "cojoin-rust-global",
    "cojoin-python",
    "kafka-streams-table-rocksdb",
    "kafka-streams-table-memory",
    "kafka-streams-table-versioned",
    "kafka-streams-global-rocksdb",
    "kafka-streams-global-memory",
    "flink-temporal",
    "quixstreams-asof",
];

/// The table of the cojoin systems' `[join]` section (it comes last there): the row as of the
/// order's timestamp (the default mode), or the row the table holds when the order is processed.
const VERSIONED: &str = "[join.table]\ntopic = \"customers\"\nmode = \"versioned\"";
const LATEST: &str = "[join.table]\ntopic = \"customers\"\nmode = \"latest\"";
const GLOBAL: &str = "[join.table]\ntopic = \"customers\"\nscope = \"global\"";

/// The cojoin systems: (name, plugin, more `[output]` settings, more `[join]` settings). The
/// order-paid plugins write `b`, here the customer's row, as the output's "payment".
pub(crate) fn cojoin_systems() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    vec![
        ("cojoin-rust", "order_paid_rust.wasm", "", VERSIONED),
        ("cojoin-rust-latest", "order_paid_rust.wasm", "", LATEST),
        ("cojoin-rust-global", "order_paid_rust.wasm", "", GLOBAL),
        ("cojoin-python", "order_paid_python.wasm", "", VERSIONED),
    ]
}

/// The Kafka Streams systems: (name, `--join`, `--store`).
pub(crate) const KAFKA_STREAMS: [(&str, &str, &str); 5] = [
    ("kafka-streams-table-rocksdb", "table", "rocksdb"),
    ("kafka-streams-table-memory", "table", "memory"),
    ("kafka-streams-table-versioned", "table", "versioned"),
    ("kafka-streams-global-rocksdb", "global-table", "rocksdb"),
    ("kafka-streams-global-memory", "global-table", "memory"),
];

/// The Kafka Streams peer joining the orders with the customers as a KTable or a GlobalKTable,
/// with the application id of this system's run (a restart uses it again).
pub(crate) fn kafka_streams(
    bootstrap: &str,
    system: &str,
    join: &str,
    store: &str,
    round: u64,
) -> Command {
    let mut cmd = java_peer("kafka-streams", "KafkaStreamsJoin");
    cmd.args(data_args(bootstrap))
        .args([
            "--output-topic",
            "bench-out",
            "--join",
            join,
            "--store",
            store,
        ])
        .args(["--app-id", &format!("bench-{system}-{round}")]);
    cmd
}

/// The Flink peer's event-time temporal join (its Table API on the mini-cluster), reading both
/// topics to their end offsets at the start and then ending.
pub(crate) fn flink(bootstrap: &str, round: u64) -> Command {
    let mut cmd = java_peer("flink", "FlinkJoin");
    cmd.args(data_args(bootstrap))
        .args(["--output-topic", "bench-out", "--bounded", "true"])
        .args(["--join", "temporal"])
        .args(["--group", &format!("bench-flink-temporal-{round}")]);
    cmd
}

/// One restart of a system and its table's restore.
#[derive(Debug, Default, Clone)]
pub(crate) struct Restore {
    pub system: String,
    /// Table records read (every version, the updates included).
    pub records: u64,
    /// Rows held once restored (cojoin's log says; Kafka Streams' listener does not).
    pub rows: Option<u64>,
    /// Bytes of table state held once restored (cojoin's log says).
    pub bytes: Option<u64>,
    /// The restore itself: the slowest task's (cojoin), or first restore start to last end
    /// (Kafka Streams' listener).
    pub seconds: f64,
    /// From the process's start until the table is restored: what a restart costs.
    pub to_restored: f64,
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
    pub failed: Option<String>,
}

/// Restarts the cojoin run `system`-`round` (its config, so its consumer group: the stream
/// consumed, the table read from its beginning by every task) until each task has logged its
/// restore, then stops it.
pub(crate) fn cojoin_restore(system: &str, round: u64, dir: &Path) -> Restore {
    eprintln!("restarting {system} for its table's restore…");
    let run = format!("{system}-{round}");
    let tag = format!("{run}-restart");
    let log = dir.join(format!("{tag}.log"));
    let started = Instant::now();
    let child = spawn_cojoin(dir, &tag, &dir.join(format!("{run}.toml")));
    let deadline = started + Duration::from_secs(600);
    // A global table is restored once per host, not per task.
    let lines = if system.ends_with("-global") {
        1
    } else {
        PARTITIONS as usize
    };
    let (restored, to_restored) = loop {
        let restored = restore_lines(&log);
        if restored.len() >= lines || Instant::now() > deadline {
            break (restored, started.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (cpu_seconds, peak_rss_mib) = stop_cojoin(child, dir, &tag);
    let failed = (restored.len() < lines).then(|| {
        format!(
            "{} of {lines} restore lines logged in 600 s; log in {log:?}",
            restored.len()
        )
    });
    Restore {
        system: system.to_owned(),
        records: restored.iter().map(|r| r.records).sum(),
        rows: Some(restored.iter().map(|r| r.rows).sum()),
        bytes: Some(restored.iter().map(|r| r.bytes).sum()),
        seconds: restored.iter().map(|r| r.seconds).fold(0.0, f64::max),
        to_restored,
        cpu_seconds,
        peak_rss_mib,
        failed,
    }
}

/// One task's restore line of cojoin's log.
struct TaskRestore {
    records: u64,
    rows: u64,
    bytes: u64,
    seconds: f64,
}

/// The restore lines of a cojoin JSON log so far, the first of each task (a rebalance would
/// restore a task again).
fn restore_lines(log: &Path) -> Vec<TaskRestore> {
    let mut tasks = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some((task, restore)) = line["fields"]["message"].as_str().and_then(parse_restored) {
            tasks.entry(task).or_insert(restore);
        }
    }
    tasks.into_values().collect()
}

/// `task P: table T-P restored: N records read, R rows, B bytes, in S s` (task/table.rs): P and
/// the figures; a global table's `global table T restored: …, in S s (X records/s)`
/// (kafka/global_table.rs) as task 0.
fn parse_restored(message: &str) -> Option<(u32, TaskRestore)> {
    let (head, figures) = message.split_once(" restored: ")?;
    let figures = figures.split(" (").next()?;
    let task = match head.strip_prefix("global table ") {
        Some(_) => 0,
        None => head
            .strip_prefix("task ")?
            .split_once(':')?
            .0
            .parse()
            .ok()?,
    };
    let mut parts = figures.split(", ");
    let mut number = |suffix: &str| -> Option<f64> {
        let part = parts.next()?;
        let part = part.strip_prefix("in ").unwrap_or(part);
        part.strip_suffix(suffix)?.trim().parse().ok()
    };
    let restore = TaskRestore {
        records: number(" records read")? as u64,
        rows: number(" rows")? as u64,
        bytes: number(" bytes")? as u64,
        seconds: number(" s")?,
    };
    Some((task, restore))
}

/// Restarts the Kafka Streams run `system`-`round` on its application id with a fresh state
/// directory, until it is RUNNING (its table restored).
pub(crate) fn kafka_streams_restore(
    bootstrap: &str,
    system: &str,
    join: &str,
    store: &str,
    round: u64,
) -> Restore {
    let mut cmd = kafka_streams(bootstrap, system, join, store, round);
    cmd.args(["--restore", "true"]);
    let name = format!("{system} restart");
    match timed_json(&name, &mut cmd) {
        Ok((v, cpu_seconds, peak_rss_mib)) => Restore {
            system: system.to_owned(),
            records: v["restored"].as_u64().unwrap_or(0),
            seconds: v["restore_seconds"].as_f64().unwrap_or(0.0),
            to_restored: v["seconds"].as_f64().unwrap_or(0.0),
            cpu_seconds,
            peak_rss_mib,
            failed: (v["state"] != "RUNNING")
                .then(|| format!("ended {} rather than RUNNING", v["state"])),
            ..Restore::default()
        },
        Err(failed) => Restore {
            system: system.to_owned(),
            failed: Some(failed),
            ..Restore::default()
        },
    }
}

/// The restore figures of one system: medians over its restarts.
struct RestoreRow {
    system: String,
    records: f64,
    rows: Option<f64>,
    mib: Option<f64>,
    seconds: f64,
    to_restored: f64,
    cpu_seconds: f64,
    peak_rss_mib: f64,
    failed: Option<String>,
}

impl RestoreRow {
    fn records_per_s(&self) -> f64 {
        self.records / self.seconds.max(1e-9)
    }

    fn rows_per_s(&self) -> Option<f64> {
        Some(self.rows? / self.seconds.max(1e-9))
    }
}

fn restore_rows(restores: &[Restore]) -> Vec<RestoreRow> {
    let mut systems: Vec<&str> = Vec::new();
    for r in restores {
        if !systems.contains(&r.system.as_str()) {
            systems.push(&r.system);
        }
    }
    systems
        .into_iter()
        .map(|system| {
            let all: Vec<&Restore> = restores.iter().filter(|r| r.system == system).collect();
            let ok: Vec<&Restore> = all.iter().copied().filter(|r| r.failed.is_none()).collect();
            let med = |x: &dyn Fn(&Restore) -> f64| {
                median(&ok.iter().map(|r| x(r)).collect::<Vec<_>>()).unwrap_or(f64::NAN)
            };
            let failed = all.iter().find_map(|r| r.failed.clone()).map(|first| {
                let n = all.len() - ok.len();
                format!("FAILED in {n} of {} restarts: {first}", all.len())
            });
            RestoreRow {
                system: system.to_owned(),
                records: med(&|r| r.records as f64),
                rows: ok
                    .iter()
                    .all(|r| r.rows.is_some())
                    .then(|| med(&|r| r.rows.unwrap_or(0) as f64)),
                mib: ok
                    .iter()
                    .all(|r| r.bytes.is_some())
                    .then(|| med(&|r| r.bytes.unwrap_or(0) as f64) / f64::from(1 << 20)),
                seconds: med(&|r| r.seconds),
                to_restored: med(&|r| r.to_restored),
                cpu_seconds: med(&|r| r.cpu_seconds),
                peak_rss_mib: med(&|r| r.peak_rss_mib),
                failed,
            }
        })
        .collect()
}

/// The second table of the stream-table report: each system's restart, medians over its runs.
pub(crate) fn report_restores(restores: &[Restore]) {
    if restores.is_empty() {
        return;
    }
    println!(
        "\ntable restore after a restart (the stream consumed; median of the restarts): cojoin from \
         its start to every task's restore line, Kafka Streams with a fresh state directory until \
         RUNNING"
    );
    println!(
        "{:<30} {:>10} {:>10} {:>9} {:>9} {:>12} {:>12} {:>13} {:>7} {:>9}",
        "system",
        "records",
        "rows",
        "table MiB",
        "restore s",
        "records/s",
        "rows/s",
        "to restored s",
        "CPU s",
        "peak MiB"
    );
    let or_dash =
        |x: Option<f64>, digits: usize| x.map_or("-".to_owned(), |x| format!("{x:.digits$}"));
    for r in restore_rows(restores) {
        if let Some(failed) = &r.failed {
            println!("{:<30} {failed}", r.system);
            continue;
        }
        println!(
            "{:<30} {:>10.0} {:>10} {:>9} {:>9.2} {:>12.0} {:>12} {:>13.2} {:>7.2} {:>9.1}",
            r.system,
            r.records,
            or_dash(r.rows, 0),
            or_dash(r.mib, 1),
            r.seconds,
            r.records_per_s(),
            or_dash(r.rows_per_s(), 0),
            r.to_restored,
            r.cpu_seconds,
            r.peak_rss_mib
        );
    }
}

/// Issue 33's targets: cojoin-rust at least 2 x Kafka Streams' records/s at at most 1/3 of its
/// CPU seconds; the global table restored at 500k rows/s or more (the co-partitioned tables'
/// restores are printed beside it for reference); peak RSS within
/// `memory.queue_bytes` + `memory.state_bytes` + the overhead README.md documents (100 MiB with a
/// Rust plugin, 250 MiB with Python at two workers).
pub(crate) fn report_targets(rows: &[Summary], restores: &[Restore]) {
    let row = |name: &str| rows.iter().find(|s| s.system == name && s.failed.is_none());
    println!();
    if let Some(c) = row("cojoin-rust") {
        for (ks, _, _) in KAFKA_STREAMS {
            if let Some(k) = row(ks) {
                println!(
                    "cojoin-rust / {ks}: records/s {:.2} (target >= 2), CPU seconds {:.2} (target <= 0.33), peak RSS {:.2}",
                    c.rate / k.rate,
                    c.cpu_seconds / k.cpu_seconds,
                    c.peak_rss_mib / k.peak_rss_mib
                );
            }
        }
    }
    if let (Some(c), Some(f)) = (row("cojoin-rust"), row("flink-temporal")) {
        println!(
            "cojoin-rust / flink-temporal: records/s {:.2}, CPU seconds {:.2}, peak RSS {:.2}",
            c.rate / f.rate,
            c.cpu_seconds / f.cpu_seconds,
            c.peak_rss_mib / f.peak_rss_mib
        );
    }
    if let (Some(c), Some(q)) = (row("cojoin-python"), row("quixstreams-asof")) {
        println!(
            "cojoin-python / quixstreams-asof: records/s {:.2}, CPU seconds {:.2}, peak RSS {:.2}",
            c.rate / q.rate,
            c.cpu_seconds / q.cpu_seconds,
            c.peak_rss_mib / q.peak_rss_mib
        );
    }
    let restored = restore_rows(restores);
    for r in restored.iter().filter(|r| r.failed.is_none()) {
        if let Some(rate) = r.rows_per_s() {
            let target = match r.system.ends_with("-global") {
                true => "target >= 500000 rows/s",
                false => "co-partitioned: each task its partition, for reference",
            };
            println!(
                "restore {}: {rate:.0} rows/s, {:.0} table records/s ({target})",
                r.system,
                r.records_per_s()
            );
        }
    }
    let (queue, state) = memory_budgets();
    for (system, overhead) in [
        ("cojoin-rust", 100.0),
        ("cojoin-rust-latest", 100.0),
        ("cojoin-rust-global", 100.0),
        ("cojoin-python", 250.0),
    ] {
        if let Some(c) = row(system) {
            let bound = queue + state + overhead;
            let held = restored
                .iter()
                .find(|r| r.system == system)
                .and_then(|r| r.mib)
                .map_or(String::new(), |mib| {
                    format!("; the table held {mib:.1} MiB")
                });
            println!(
                "peak RSS {system}: {:.1} MiB, bound queue_bytes {queue:.0} + state_bytes {state:.0} + {overhead:.0} MiB = {bound:.0} MiB: {}{held}",
                c.peak_rss_mib,
                if c.peak_rss_mib <= bound { "within" } else { "OVER" },
            );
        }
    }
}

/// `memory.queue_bytes` and `memory.state_bytes` of the cojoin runs in MiB: BENCH_MEMORY's, else
/// the defaults (64 MiB, 1 GiB).
fn memory_budgets() -> (f64, f64) {
    let lines = std::env::var("BENCH_MEMORY").unwrap_or_default();
    let setting = |name: &str, default: f64| {
        lines
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == name)
            .and_then(|(_, v)| mib(v.trim().trim_matches('"')))
            .unwrap_or(default)
    };
    (setting("queue_bytes", 64.0), setting("state_bytes", 1024.0))
}

/// `"256MiB"`, `"1GiB"`, `"512KiB"` or a number of bytes, in MiB.
fn mib(text: &str) -> Option<f64> {
    let units = [("GiB", 1024.0), ("MiB", 1.0), ("KiB", 1.0 / 1024.0)];
    for (unit, scale) in units {
        if let Some(n) = text.strip_suffix(unit) {
            return n.trim().parse::<f64>().ok().map(|n| n * scale);
        }
    }
    text.parse::<f64>().ok().map(|b| b / f64::from(1 << 20))
}

/// The header of the stream-table report: the stream's and the table's records.
pub(crate) fn describe(records: u64, produced: &serde_json::Value) -> String {
    let topics = topics();
    format!(
        "{records} records of the stream {} joined with the table {} ({} rows, {} records with the updates)",
        topics[0],
        topics[1],
        produced["rows"].as_u64().unwrap_or(0),
        produced["right"].as_u64().unwrap_or(0)
    )
}
