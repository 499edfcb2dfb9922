//! The join benchmark (`make bench-join`): one generated data set on an Apache Kafka 4.4 broker
//! (tests/kafka/broker.sh), then, in each of BENCH_RUNS rounds, every system in turn:
//! - the bare consumer: rdkafka reading both topics and doing nothing (this binary, `--bare`);
//! - `cojoin run` with the Rust no-op, the Rust order-paid, the Python and the JS plugin;
//! - Kafka Streams 4.4 (host/benches/peers/kafka-streams), the KStream-KStream join with its
//!   default RocksDB window stores and with in-memory ones, producing the order-paid output;
//! - Flink 2.2 (host/benches/peers/flink), the DataStream interval join on a local mini-cluster
//!   (one JVM, parallelism = cores), producing the same output;
//! - the hand-written Python join (confluent-kafka) and the Quix Streams interval join, from
//!   host/benches/peers/ — the same inner join.
//!
//! BENCH_TOPICS=3 (`make bench-join-3`) runs the three-topic data set instead (issue 32): topics
//! `orders`, `payments` and `shipments`, every key one event per topic, the three within the
//! window of each other (produce.py `--third`), so that a three-way join and two chained pairwise
//! joins find the same matches, one per key. Its systems: the bare consumer (reading the three
//! topics), `cojoin run` three-way (`join.topics`) with the Rust and the Python order-shipped
//! plugin (cojoin-rust, cojoin-python), Kafka Streams as two chained `KStream#join`s with RocksDB
//! and in-memory stores (kafka-streams-rocksdb, kafka-streams-memory) and Flink as two chained
//! `intervalJoin`s (flink), each producing the order-shipped record; the ratios printed are the
//! issue's targets for it. What its state costs per key against two chained cojoin joins is the
//! memory benchmark's second table (host/benches/memory.rs, run by `make bench-matcher`).
//!
//! BENCH_DATA=table (`make bench-join-table`) runs the stream-table data set instead (issue 33):
//! a table topic `customers` (BENCH_TABLE_ROWS rows, default BENCH_RECORDS, one per key, and an
//! update of a tenth of them), produced first, then a stream `orders` of BENCH_RECORDS records
//! keyed by customers drawn uniformly from the table's keys, stamped after every row (produce.py
//! `--table`); same partition counts, every order matches its customer's row. Its systems: the
//! bare consumer (both topics), `cojoin run` with `join.table` (`mode = "versioned"`, the default,
//! and `"latest"`) and the Rust and Python order-paid plugins (cojoin-rust, cojoin-rust-latest,
//! cojoin-python), Kafka Streams' KStream-KTable join with RocksDB, in-memory and versioned stores
//! and its KStream-GlobalKTable join with RocksDB and in-memory stores, Flink's event-time
//! temporal join (Table API) and Quix Streams' `join_asof`. After each run of a cojoin or Kafka
//! Streams system, its restart on the same group (the stream consumed) times the table's restore:
//! the second table of the report (join/table).
//!
//! Rounds rather than each system's runs back to back, so that drift on the machine touches every
//! system alike. For each system: the median over the runs of records/s (first record to last),
//! then each run's records/s in brackets, the medians of matches/s, matches, CPU seconds and peak
//! RSS of the process (GNU time), and the match check: `ok` only if every run reported the expected
//! count, else which runs did not and their counts. A system that failed in any run is shown as
//! FAILED, with in how many runs and the first reason. Then the machine (nproc, CPU model), the
//! ratios the project targets (of the median rates), the bytes each cojoin system's runs added to
//! the output topic's segments on the broker's disk (what `output.compression` saves), and an SVG
//! bar chart of the median records/s, target/bench-runs/join/throughput.svg.
//!
//! Environment: BENCH_TOPICS (2, default, or 3: the data set above), BENCH_RECORDS (per topic,
//! default 200000), BENCH_BATCH (records per producer batch, default 10000), BENCH_RUNS (rounds,
//! default 3; the data set is produced once), BENCH_SYSTEMS (comma-separated names to run, default
//! all of the data set's; with two topics: bare, cojoin-noop, cojoin-rust, cojoin-rust-zstd
//! (`output.compression = "zstd"`), cojoin-rust-eos (exactly-once; -50ms and -20ms with that
//! `output.commit_interval` instead of its 100 ms),
//! cojoin-rust-repartition (both sides through internal topics first), cojoin-python,
//! cojoin-js, kafka-streams-rocksdb, kafka-streams-memory, flink, python-handwritten,
//! python-handwritten-producing, quixstreams),
//! BENCH_WORKERS (cojoin's `plugin.workers`, default unset: one per core), PYTHON_BENCH (default
//! .venv-bench/bin/python), BENCH_JAVA_HEAP (the Java peers' -Xmx, default 1g), BENCH_WINDOW_MS and
//! BENCH_GRACE_MS (default 1000 each), BENCH_PERF=1 (`perf record -g` of each cojoin run, beside
//! its log), BENCH_VALUE_BYTES (default 100), BENCH_STEP_MS (event-time
//! gap between left records, default 10), BENCH_MEMORY (lines for cojoin's `[memory]` section,
//! e.g. `state_bytes = "256MiB"`), BENCH_KAFKA_OPTIONS (lines for its `[kafka.options]`), BENCH_KIND (`inner`, default, or `left`: the runs also wait for
//! the unpaid orders' expiries), BENCH_VERIFY=1 (one system and run: check the output topic holds
//! exactly the expected outcome per order: with three topics, every order shipped).
//!
//! The pieces, in join/: `summary` (medians and the table, also unit-tested by the library),
//! `peers` (the systems other than cojoin, as commands), `timing` (a run under GNU time),
//! `cojoin` (a `cojoin run` measured through its metrics), `report` (the text and chart at the
//! end), `verify` (BENCH_VERIFY's check of the output topic) and `table` (the stream-table data
//! set's systems and its restore times).

#[path = "join/cojoin.rs"]
mod cojoin;
#[path = "join/peers.rs"]
mod peers;
#[path = "join/report.rs"]
mod report;
#[path = "join/summary.rs"]
mod summary;
#[path = "join/table.rs"]
mod table;
#[path = "join/timing.rs"]
mod timing;
#[path = "join/verify.rs"]
mod verify;

use std::path::PathBuf;
use std::process::Command;

use cojoin::cojoin_run;
use cojoin_e2e::broker::Kafka;
use cojoin_e2e::{plugin, root};
use peers::{bare, flink, kafka_streams, peer};
use report::{chart_svg, report, report_output_bytes};
use summary::{summarize, Figures, Summary};
use timing::timed;
use verify::verify_outputs;

const PARTITIONS: i32 = 6;
/// The join window and grace: BENCH_WINDOW_MS, BENCH_GRACE_MS (default 1 s each).
fn window_ms() -> u64 {
    env_or("BENCH_WINDOW_MS", 1_000)
}
fn grace_ms() -> u64 {
    env_or("BENCH_GRACE_MS", 1_000)
}
const BARE: &str = "bare consumer";

/// The systems of the three-topic data set (BENCH_TOPICS=3), by their BENCH_SYSTEMS names.
const THREE_TOPIC_SYSTEMS: [&str; 6] = [
    "bare",
    "cojoin-rust",
    "cojoin-python",
    "kafka-streams-rocksdb",
    "kafka-streams-memory",
    "flink",
];

/// Which data set the benchmark produces and joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataSet {
    /// `left` and `right`: orders and payments, a windowed stream-stream join (the default).
    Pair,
    /// `orders`, `payments`, `shipments` (BENCH_TOPICS=3, issue 32).
    Three,
    /// `orders` joined with the table `customers` (BENCH_DATA=table, issue 33).
    Table,
}

/// BENCH_DATA=table, else BENCH_TOPICS (2, default, or 3).
pub(crate) fn data_set() -> DataSet {
    match std::env::var("BENCH_DATA").as_deref() {
        Ok("table") => return DataSet::Table,
        Ok("") | Err(_) => {}
        Ok(other) => panic!("BENCH_DATA={other}: the join benchmark's named data set is `table`"),
    }
    match env_or("BENCH_TOPICS", 2) {
        2 => DataSet::Pair,
        3 => DataSet::Three,
        n => panic!("BENCH_TOPICS={n}: the join benchmark has data sets of 2 and 3 topics"),
    }
}

/// The data set's topics: `left` and `right` (orders and payments); `orders`, `payments` and
/// `shipments`; or the stream `orders` and the table `customers`.
pub(crate) fn topics() -> &'static [&'static str] {
    match data_set() {
        DataSet::Pair => &["left", "right"],
        DataSet::Three => &["orders", "payments", "shipments"],
        DataSet::Table => &["orders", "customers"],
    }
}

/// The systems a data set other than the pair runs, by their BENCH_SYSTEMS names (the pair runs
/// every system).
fn data_set_systems() -> Option<&'static [&'static str]> {
    match data_set() {
        DataSet::Pair => None,
        DataSet::Three => Some(&THREE_TOPIC_SYSTEMS),
        DataSet::Table => Some(&table::SYSTEMS),
    }
}

/// The cojoin systems of the data set, in the order they run: (name, plugin, more `[output]`
/// settings, more `[join]` settings).
fn cojoin_systems() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    if data_set() == DataSet::Table {
        return table::cojoin_systems();
    }
    if topics().len() == 3 {
        // The three-way join calls `on-match-n` with an order, a payment and a shipment.
        return vec![
            ("cojoin-rust", "order_shipped_rust.wasm", "", ""),
            ("cojoin-python", "order_shipped_python.wasm", "", ""),
        ];
    }
    // cojoin-rust-repartition: the same data with both sides re-keyed into internal topics
    // first (join.repartition = "always"): what repartitioning costs. cojoin-rust-zstd: the
    // outputs compressed, what that costs in CPU and saves on the broker's disk.
    vec![
        ("cojoin-noop", "noop.wasm", "", ""),
        ("cojoin-rust", "order_paid_rust.wasm", "", ""),
        (
            "cojoin-rust-zstd",
            "order_paid_rust.wasm",
            "compression = \"zstd\"",
            "",
        ),
        (
            "cojoin-rust-eos",
            "order_paid_rust.wasm",
            "guarantee = \"exactly-once\"",
            "",
        ),
        // The commit interval is the delay a read_committed reader sees (bench-latency):
        // what a shorter one costs in throughput.
        (
            "cojoin-rust-eos-50ms",
            "order_paid_rust.wasm",
            "guarantee = \"exactly-once\"\ncommit_interval = \"50ms\"",
            "",
        ),
        (
            "cojoin-rust-eos-20ms",
            "order_paid_rust.wasm",
            "guarantee = \"exactly-once\"\ncommit_interval = \"20ms\"",
            "",
        ),
        (
            "cojoin-rust-repartition",
            "order_paid_rust.wasm",
            "",
            "repartition = \"always\"",
        ),
        ("cojoin-python", "order_paid_python.wasm", "", ""),
        ("cojoin-js", "order_paid_js.wasm", "", ""),
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--bare") {
        bare(&args[2], args[3].parse().unwrap());
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let records: u64 = env_or("BENCH_RECORDS", 200_000);
    // Records per producer flush in produce.py.
    let batch: u64 = env_or("BENCH_BATCH", 10_000);
    let runs: u64 = env_or("BENCH_RUNS", 3).max(1);
    let python = std::env::var("PYTHON_BENCH")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join(".venv-bench/bin/python"));
    let wanted: Option<Vec<String>> = std::env::var("BENCH_SYSTEMS")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    let only = data_set_systems();
    if let (Some(only), Some(wanted)) = (only, &wanted) {
        let other: Vec<&String> = wanted
            .iter()
            .filter(|w| !only.contains(&w.as_str()))
            .collect();
        assert!(
            other.is_empty(),
            "BENCH_SYSTEMS names {other:?}, which the {:?} data set does not run; its systems: {}",
            data_set(),
            only.join(",")
        );
    }
    let run = |name: &str| {
        only.is_none_or(|only| only.contains(&name))
            && wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == name))
    };
    let table = data_set() == DataSet::Table;

    let dir = root().join("target/bench-runs/join");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kafka = Kafka::start(&dir);
    for topic in topics() {
        kafka.create_topic(topic, PARTITIONS);
    }
    kafka.create_topic("bench-out", PARTITIONS);
    kafka.create_topic("bench-dlq", 1);
    kafka.create_topic("bench-peer-out", PARTITIONS);

    let peers = root().join("host/benches/peers");
    eprintln!("producing {records} records per topic…");
    let mut produce = peer(&python, &peers, "produce.py", &kafka.bootstrap);
    if table {
        produce.arg("--table").args([
            "--table-rows",
            &env_or("BENCH_TABLE_ROWS", records).to_string(),
        ]);
    }
    let out = produce
        .args([
            "--records",
            &records.to_string(),
            "--window-ms",
            &window_ms().to_string(),
        ])
        .args(["--batch-size", &batch.to_string()])
        .args([
            "--value-bytes",
            &env_or("BENCH_VALUE_BYTES", 100).to_string(),
        ])
        .args(["--step-ms", &env_or("BENCH_STEP_MS", 10).to_string()])
        .output()
        .expect("running produce.py (make bench-join sets up .venv-bench)");
    assert!(
        out.status.success(),
        "produce.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let produced: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = produced["expected_matches"].as_u64().unwrap();
    let total = produced["records"].as_u64().unwrap();
    eprintln!("{produced}");

    // Each system's runs, in the order the systems run.
    let mut by_system: Vec<(String, Vec<Figures>)> = Vec::new();
    // What each cojoin run added to the output topic's segments on the broker's disk.
    let mut output_bytes: Vec<(&str, Vec<f64>)> = Vec::new();
    // Started before a system runs: records the broker's CPU seconds since then with its figures.
    let broker_since = || {
        let start = kafka.cpu_seconds();
        move |mut f: Figures, kafka: &Kafka| {
            f.broker_cpu_seconds = kafka.cpu_seconds() - start;
            f
        }
    };
    // The stream-table data set: each restart's restore of the table, per system.
    let mut restores: Vec<table::Restore> = Vec::new();
    let mut add = |f: Figures| match by_system.iter_mut().find(|(s, _)| *s == f.system) {
        Some((_, runs)) => runs.push(f),
        None => by_system.push((f.system.clone(), vec![f])),
    };
    for round in 1..=runs {
        eprintln!("round {round} of {runs}");
        if run("bare") {
            let since = broker_since();
            let f = timed(
                BARE,
                Command::new(std::env::current_exe().unwrap()).args([
                    "--bare",
                    &kafka.bootstrap,
                    &total.to_string(),
                ]),
            );
            add(since(f, &kafka));
        }
        for (name, wasm, output_extra, join_extra) in cojoin_systems() {
            if run(name) {
                let since = broker_since();
                let before = kafka.bytes_on_disk("bench-out", PARTITIONS);
                let f = cojoin_run(
                    name,
                    round,
                    &dir,
                    &kafka.bootstrap,
                    (&plugin(wasm), output_extra, join_extra),
                    total,
                    expected,
                );
                let written = kafka.bytes_on_disk("bench-out", PARTITIONS) - before;
                if table && f.failed.is_none() {
                    restores.push(table::cojoin_restore(name, round, &dir));
                }
                match output_bytes.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, runs)) => runs.push(written as f64),
                    None => output_bytes.push((name, vec![written as f64])),
                }
                add(since(f, &kafka));
            }
        }
        if table {
            for (name, join, store) in table::KAFKA_STREAMS {
                if run(name) {
                    let mut cmd = table::kafka_streams(&kafka.bootstrap, name, join, store, round);
                    cmd.args(["--expect", &total.to_string()])
                        .args(["--expect-matches", &expected.to_string()]);
                    let since = broker_since();
                    let f = timed(name, &mut cmd);
                    let ok = f.failed.is_none();
                    add(since(f, &kafka));
                    if ok {
                        restores.push(table::kafka_streams_restore(
                            &kafka.bootstrap,
                            name,
                            join,
                            store,
                            round,
                        ));
                    }
                }
            }
            if run("flink-temporal") {
                let since = broker_since();
                let f = timed("flink-temporal", &mut table::flink(&kafka.bootstrap, round));
                add(since(f, &kafka));
            }
            if run("quixstreams-asof") {
                let mut cmd = peer(&python, &peers, "quix_join.py", &kafka.bootstrap);
                cmd.args(["--join", "asof", "--expect", &total.to_string()]);
                let since = broker_since();
                let f = timed("quixstreams-asof", &mut cmd);
                add(since(f, &kafka));
            }
        }
        for (name, store) in [
            ("kafka-streams-rocksdb", "rocksdb"),
            ("kafka-streams-memory", "memory"),
        ] {
            if run(name) {
                let mut cmd = kafka_streams(&kafka.bootstrap, store);
                cmd.args(["--expect", &total.to_string()])
                    .args(["--expect-matches", &expected.to_string()])
                    .args(["--app-id", &format!("bench-{name}-{round}")]);
                let since = broker_since();
                let f = timed(name, &mut cmd);
                add(since(f, &kafka));
            }
        }
        if run("flink") {
            let mut cmd = flink(&kafka.bootstrap, &format!("bench-flink-{round}"));
            let since = broker_since();
            let f = timed("flink", &mut cmd);
            add(since(f, &kafka));
        }
        // The hand-written join builds its outputs; "-producing" also produces them, as cojoin
        // does (what a join that replaces cojoin would have to do).
        for (name, script, output_topic) in [
            ("python-handwritten", "handwritten_join.py", None),
            (
                "python-handwritten-producing",
                "handwritten_join.py",
                Some("bench-peer-out"),
            ),
            ("quixstreams", "quix_join.py", None),
        ] {
            if run(name) {
                // The peers join a fresh consumer group each time, so every run reads from the start.
                let mut cmd = peer(&python, &peers, script, &kafka.bootstrap);
                cmd.args([
                    "--window-ms",
                    &window_ms().to_string(),
                    "--grace-ms",
                    &grace_ms().to_string(),
                ])
                .args(["--expect", &total.to_string()]);
                if let Some(topic) = output_topic {
                    cmd.args(["--output-topic", topic]);
                }
                let since = broker_since();
                let f = timed(name, &mut cmd);
                add(since(f, &kafka));
            }
        }
    }
    let rows: Vec<Summary> = by_system
        .iter()
        .map(|(system, figures)| {
            let expected = (system != BARE).then_some(expected);
            summarize(system, figures, expected)
        })
        .collect();
    let data = match data_set() {
        DataSet::Table => table::describe(records, &produced),
        _ => format!(
            "{} records",
            vec![records.to_string(); topics().len()].join(" + ")
        ),
    };
    report(&rows, &data, expected, runs);
    if table {
        table::report_restores(&restores);
        table::report_targets(&rows, &restores);
    }
    report_output_bytes(&output_bytes);
    if std::env::var("BENCH_VERIFY").is_ok_and(|v| v == "1") {
        verify_outputs(&kafka.bootstrap, records);
    }
    let chart = dir.join("throughput.svg");
    std::fs::write(&chart, chart_svg(&rows, records, runs)).unwrap();
    println!(
        "\nchart: {}",
        std::fs::canonicalize(&chart).unwrap_or(chart).display()
    );
}

/// `join.kind` of the cojoin runs: BENCH_KIND, `inner` (default) or `left`.
fn join_kind() -> String {
    std::env::var("BENCH_KIND").unwrap_or_else(|_| "inner".into())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
