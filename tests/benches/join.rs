//! The join benchmark (`make bench-join`): one generated data set on an Apache Kafka 4.4 broker
//! (tests/kafka/broker.sh), then, in each of BENCH_RUNS rounds, every system in turn:
//! - the bare consumer: rdkafka reading both topics and doing nothing (this binary, `--bare`);
//! - `cojoin run` with the Rust no-op, the Rust order-paid, the Python and the JS plugin;
//! - Kafka Streams 4.4 (host/benches/peers/kafka-streams), the KStream-KStream join with its
//!   default RocksDB window stores and with in-memory ones, producing the order-paid output;
//! - the hand-written Python join (confluent-kafka) and the Quix Streams interval join, from
//!   host/benches/peers/ — the same inner join.
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
//! Environment: BENCH_RECORDS (per topic, default 200000), BENCH_BATCH (records per producer batch,
//! default 10000), BENCH_RUNS (rounds, default 3; the data set is produced once), BENCH_SYSTEMS
//! (comma-separated names to run, default all: bare, cojoin-noop, cojoin-rust, cojoin-rust-zstd
//! (`output.compression = "zstd"`), cojoin-rust-eos (exactly-once),
//! cojoin-rust-repartition (both sides through internal topics first), cojoin-python,
//! cojoin-js, kafka-streams-rocksdb, kafka-streams-memory, python-handwritten,
//! python-handwritten-producing, quixstreams),
//! BENCH_WORKERS (cojoin's `plugin.workers`, default unset: one per core), PYTHON_BENCH (default
//! .venv-bench/bin/python), BENCH_JAVA_HEAP (Kafka Streams' -Xmx, default 1g), BENCH_WINDOW_MS and
//! BENCH_GRACE_MS (default 1000 each), BENCH_PERF=1 (`perf record -g` of each cojoin run, beside
//! its log), BENCH_VALUE_BYTES (default 100), BENCH_STEP_MS (event-time
//! gap between left records, default 10), BENCH_MEMORY (lines for cojoin's `[memory]` section,
//! e.g. `state_bytes = "256MiB"`), BENCH_KIND (`inner`, default, or `left`: the runs also wait for
//! the unpaid orders' expiries), BENCH_VERIFY=1 (one system and run: check the output topic holds
//! exactly the expected outcome per order).

#[path = "join/summary.rs"]
mod summary;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::logged_admin_url;
use cojoin_e2e::http::{get, sample};
use cojoin_e2e::plot::{bar_chart_svg, Bar};
use cojoin_e2e::{cojoin_bin, plugin, root};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use summary::{cpu_model, summarize, table, Figures, Summary};

const PARTITIONS: i32 = 6;
/// The join window and grace: BENCH_WINDOW_MS, BENCH_GRACE_MS (default 1 s each).
fn window_ms() -> u64 {
    env_or("BENCH_WINDOW_MS", 1_000)
}
fn grace_ms() -> u64 {
    env_or("BENCH_GRACE_MS", 1_000)
}
const BARE: &str = "bare consumer";

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
    let run = |name: &str| wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == name));

    let dir = root().join("target/bench-runs/join");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kafka = Kafka::start(&dir);
    for topic in ["left", "right"] {
        kafka.create_topic(topic, PARTITIONS);
    }
    kafka.create_topic("bench-out", PARTITIONS);
    kafka.create_topic("bench-dlq", 1);
    kafka.create_topic("bench-peer-out", PARTITIONS);

    let peers = root().join("host/benches/peers");
    eprintln!("producing {records} records per topic…");
    let out = peer(&python, &peers, "produce.py", &kafka.bootstrap)
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
        // cojoin-rust-repartition: the same data with both sides re-keyed into internal topics
        // first (join.repartition = "always"): what repartitioning costs. cojoin-rust-zstd: the
        // outputs compressed, what that costs in CPU and saves on the broker's disk.
        for (name, wasm, output_extra, join_extra) in [
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
            (
                "cojoin-rust-repartition",
                "order_paid_rust.wasm",
                "",
                "repartition = \"always\"",
            ),
            ("cojoin-python", "order_paid_python.wasm", "", ""),
            ("cojoin-js", "order_paid_js.wasm", "", ""),
        ] {
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
                match output_bytes.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, runs)) => runs.push(written as f64),
                    None => output_bytes.push((name, vec![written as f64])),
                }
                add(since(f, &kafka));
            }
        }
        for (name, store) in [
            ("kafka-streams-rocksdb", "rocksdb"),
            ("kafka-streams-memory", "memory"),
        ] {
            if run(name) {
                let mut cmd = kafka_streams(&peers, &kafka.bootstrap, store);
                cmd.args(["--expect", &total.to_string()])
                    .args(["--expect-matches", &expected.to_string()])
                    .args(["--app-id", &format!("bench-{name}-{round}")]);
                let since = broker_since();
                let f = timed(name, &mut cmd);
                add(since(f, &kafka));
            }
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
    report(&rows, expected, records, runs);
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

/// The arguments every peer takes to find the data: the broker and the two topics.
fn data_args(bootstrap: &str) -> [&str; 6] {
    [
        "--bootstrap",
        bootstrap,
        "--left",
        "left",
        "--right",
        "right",
    ]
}

/// A script of host/benches/peers/ run by `python`, pointed at the broker's `left` and `right`.
fn peer(python: &Path, peers: &Path, script: &str, bootstrap: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(peers.join(script)).args(data_args(bootstrap));
    cmd
}

/// The Kafka Streams peer (built by `make bench-join`) joining `left` and `right` into
/// `bench-out` with `store` window stores ("rocksdb" or "memory").
fn kafka_streams(peers: &Path, bootstrap: &str, store: &str) -> Command {
    let app = peers.join("kafka-streams/target");
    assert!(
        app.join("classes/dev/cojoin/bench/KafkaStreamsJoin.class")
            .exists(),
        "the Kafka Streams peer is not built: run `make bench-join` (mvn package in {app:?}/..)"
    );
    let heap = std::env::var("BENCH_JAVA_HEAP").unwrap_or_else(|_| "1g".into());
    let mut cmd = Command::new("java");
    cmd.arg(format!("-Xmx{heap}"))
        .arg("-cp")
        .arg(format!(
            "{}:{}/*",
            app.join("classes").display(),
            app.join("libs").display()
        ))
        .arg("dev.cojoin.bench.KafkaStreamsJoin")
        .args(data_args(bootstrap))
        .args(["--output-topic", "bench-out", "--store", store])
        .args(["--window-ms", &window_ms().to_string()])
        .args(["--grace-ms", &grace_ms().to_string()]);
    cmd
}

/// `join.kind` of the cojoin runs: BENCH_KIND, `inner` (default) or `left`.
fn join_kind() -> String {
    std::env::var("BENCH_KIND").unwrap_or_else(|_| "inner".into())
}

/// A left join reports every order without a payment in its window: each key has one order, so
/// those are the orders (half the records) less the matches.
fn expected_expiries(total: u64, matches: u64) -> u64 {
    match join_kind().as_str() {
        "left" => total / 2 - matches,
        _ => 0,
    }
}

/// BENCH_VERIFY=1 (one system, one run): reads the output topic and checks that it holds exactly
/// the expected set — order `k-i` paid for even i, unpaid (left join) for odd i, each once — as
/// produce.py generates it with one key per record. Panics with what differs.
fn verify_outputs(bootstrap: &str, records: u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-verify")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset("bench-out", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let left = join_kind() == "left";
    let want = if left { records } else { records.div_ceil(2) };
    let mut seen = std::collections::HashMap::<String, String>::new();
    let mut duplicates = 0u64;
    let mut idle = Instant::now();
    while seen.len() < want as usize || idle.elapsed() < Duration::from_secs(3) {
        if idle.elapsed() > Duration::from_secs(60) {
            break;
        }
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        idle = Instant::now();
        let m = m.expect("reading bench-out");
        let body: serde_json::Value =
            serde_json::from_slice(rdkafka::Message::payload(&m).unwrap()).unwrap();
        let id = body["order_id"].as_str().unwrap().to_owned();
        let status = body["status"].as_str().unwrap().to_owned();
        if seen.insert(id, status).is_some() {
            duplicates += 1;
        }
    }
    let mut wrong = Vec::new();
    for i in 0..records {
        let want = match (i % 2, left) {
            (0, _) => Some("paid"),
            (_, true) => Some("unpaid"),
            (_, false) => None,
        };
        if seen.get(&format!("k-{i}")).map(String::as_str) != want {
            wrong.push(i);
        }
    }
    println!(
        "verify: {} distinct orders out, {duplicates} duplicates, {} of {records} orders not as expected (first: {:?})",
        seen.len(),
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(
        wrong.is_empty() && seen.len() as u64 == want,
        "the output set differs from the expected one"
    );
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The limit: read every partition of both topics from the start, touching nothing.
fn bare(bootstrap: &str, expect: u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-bare")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for topic in ["left", "right"] {
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
    }
    consumer.assign(&tpl).unwrap();
    let (mut n, mut first) = (0u64, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while n < expect && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            m.expect("consuming");
            first.get_or_insert_with(Instant::now);
            n += 1;
        }
    }
    let seconds = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    println!(
        "{}",
        serde_json::json!({"records": n, "matches": null, "seconds": seconds})
    );
}

/// Runs `cmd` under GNU time; its last stdout line is a JSON object with records, matches, seconds.
fn timed(system: &str, cmd: &mut Command) -> Figures {
    eprintln!("running {system}…");
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "TIME %U %S %M"])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running /usr/bin/time");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let Some(Ok(v)) = line.map(serde_json::from_str::<serde_json::Value>) else {
        // The run goes on with the other systems; the table says this one failed, and why.
        eprintln!("{system} printed no result:\n{stdout}\n{stderr}");
        let last = stderr
            .lines()
            .rfind(|l| !l.starts_with("TIME") && !l.starts_with("Command exited"));
        return Figures {
            system: system.to_owned(),
            failed: Some(last.unwrap_or("no output").to_owned()),
            ..Figures::default()
        };
    };
    let mut f = Figures {
        system: system.to_owned(),
        records: v["records"].as_u64().unwrap_or(0),
        matches: v["matches"].as_u64().unwrap_or(0),
        seconds: v["seconds"].as_f64().unwrap_or(0.0),
        ..Figures::default()
    };
    (f.cpu_seconds, f.peak_rss_mib) = gnu_time(&stderr);
    f
}

/// (user + system CPU seconds, peak RSS MiB) from GNU time's `TIME %U %S %M` line.
fn gnu_time(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("TIME "))
        .unwrap_or("0 0 0");
    let n: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (
        n.first().unwrap_or(&0.0) + n.get(1).unwrap_or(&0.0),
        n.get(2).unwrap_or(&0.0) / 1024.0,
    )
}

/// `cojoin run` on the data set: throughput from its `/metrics` (first record consumed to the
/// last), then SIGTERM, and CPU and peak RSS from GNU time.
fn cojoin_run(
    system: &str,
    round: u64,
    dir: &Path,
    bootstrap: &str,
    // The plugin, more [output] settings, and more [join] settings.
    (wasm, output_extra, join_extra): (&Path, &str, &str),
    total: u64,
    expected: u64,
) -> Figures {
    eprintln!("running {system}…");
    // Its own consumer group and files each round: a group that committed would resume at the end.
    let tag = format!("{system}-{round}");
    let config = dir.join(format!("{tag}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"
[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "bench-{tag}"
[kafka.options]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[join]
left = "left"
right = "right"
kind = "{}"
window = "{}ms"
grace = "{}ms"
{join_extra}
[plugin]
path = "{}"
watch = false
{}
[output]
topic = "bench-out"
dead_letter_topic = "bench-dlq"
{output_extra}
[admin]
bind = "127.0.0.1:0"
[memory]
{}
"#,
            join_kind(),
            window_ms(),
            grace_ms(),
            wasm.display(),
            workers_line(),
            std::env::var("BENCH_MEMORY").unwrap_or_default(),
        ),
    )
    .unwrap();
    let log = dir.join(format!("{tag}.log"));
    let mut command = Command::new("/usr/bin/time");
    command
        .args(["-f", "TIME %U %S %M", "-o"])
        .arg(dir.join(format!("{tag}.time")));
    // BENCH_PERF=1: a profile of each cojoin run (its CPU figures then include perf's cost).
    if std::env::var("BENCH_PERF").is_ok_and(|v| v == "1") {
        command
            .args(["perf", "record", "-F", "999", "-g", "-o"])
            .arg(dir.join(format!("{tag}.perf.data")))
            .arg("--");
    }
    let mut child = command
        .arg(cojoin_bin())
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .env("COJOIN_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = admin_url(&log);
    // From the first record consumed until every record is consumed and every expected match
    // made (or, when matches fall short, until they stop moving for 5 s: the table flags it).
    let (mut first, mut last) = (None, None);
    let mut page = String::new();
    let mut seen = (0.0, 0.0, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        page = get(&format!("{url}/metrics")).body;
        let consumed = sample(&page, "cojoin_records_consumed_total{topic=\"left\"}")
            .unwrap_or(0.0)
            + sample(&page, "cojoin_records_consumed_total{topic=\"right\"}").unwrap_or(0.0);
        let matches = sample(&page, "cojoin_matches_total").unwrap_or(0.0);
        // A left join's unmatched orders come out when their windows close, after the matches.
        let expiries = sample(&page, "cojoin_expiries_total").unwrap_or(0.0) as u64;
        let matches = if expiries >= expected_expiries(total, expected) {
            matches
        } else {
            matches.min(expected as f64 - 1.0)
        };
        if consumed > 0.0 {
            first.get_or_insert_with(Instant::now);
        }
        if (consumed, matches) != (seen.0, seen.1) {
            seen = (consumed, matches, Instant::now());
        }
        if consumed as u64 >= total
            && (matches as u64 >= expected || seen.2.elapsed() > Duration::from_secs(5))
        {
            last = Some(if matches as u64 >= expected {
                Instant::now()
            } else {
                seen.2
            });
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let matches = sample(&page, "cojoin_matches_total").unwrap_or(0.0) as u64;
    let held = (0..PARTITIONS)
        .map(|p| {
            (
                sample(&page, &format!("cojoin_state_events{{task=\"{p}\"}}")).unwrap_or(0.0),
                sample(&page, &format!("cojoin_state_bytes{{task=\"{p}\"}}")).unwrap_or(0.0),
            )
        })
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    if held.0 > 0.0 {
        eprintln!(
            "{system}: {} events held, {:.0} bytes each",
            held.0,
            held.1 / held.0
        );
    }
    // SIGTERM to cojoin itself (the child of GNU time), which then reports its usage.
    let status = Command::new("pkill")
        .args(["-TERM", "-P", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "no cojoin process under GNU time");
    let _ = child.wait();
    let time = std::fs::read_to_string(dir.join(format!("{tag}.time"))).unwrap_or_default();
    let (cpu_seconds, peak_rss_mib) = gnu_time(&time);
    let (seconds, failed) = match (first, last) {
        (Some(f), Some(l)) => ((l - f).as_secs_f64(), None),
        _ => (
            0.0,
            Some(format!(
                "did not consume all {total} records; log in {log:?}"
            )),
        ),
    };
    Figures {
        system: system.to_owned(),
        records: total,
        matches,
        seconds,
        cpu_seconds,
        peak_rss_mib,
        failed,
        ..Figures::default()
    }
}

fn admin_url(log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(url) = logged_admin_url(log) {
            return url;
        }
        assert!(Instant::now() < deadline, "no admin URL in {log:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `[plugin]` line BENCH_WORKERS asks for, if any.
fn workers_line() -> String {
    std::env::var("BENCH_WORKERS")
        .map(|n| format!("workers = {n}"))
        .unwrap_or_default()
}

fn report(rows: &[Summary], expected: u64, records: u64, runs: u64) {
    println!(
        "\njoin benchmark: {records} + {records} records, {}-byte values, window {} ms, grace {} ms; expected matches {expected}; median of {runs} runs",
        env_or("BENCH_VALUE_BYTES", 100),
        window_ms(),
        grace_ms()
    );
    let workers = std::env::var("BENCH_WORKERS").unwrap_or_else(|_| "one per core".into());
    println!("{}; cojoin workers: {workers}", machine());
    for line in table(rows) {
        println!("{line}");
    }
    let rate = |name: &str| {
        rows.iter()
            .find(|s| s.system == name && s.failed.is_none())
            .map(|s| s.rate)
    };
    println!();
    for (a, b, target) in [
        ("cojoin-rust", BARE, 0.7),
        ("cojoin-rust", "kafka-streams-rocksdb", 2.0),
        ("cojoin-rust", "kafka-streams-memory", 2.0),
        ("cojoin-python", "quixstreams", 5.0),
        ("cojoin-python", "python-handwritten", 1.0),
        ("cojoin-python", "python-handwritten-producing", 1.0),
    ] {
        if let (Some(x), Some(y)) = (rate(a), rate(b)) {
            println!("records/s {a} / {b}: {:.2} (target >= {target})", x / y);
        }
    }
    // Against Kafka Streams also the cost: cojoin-rust's CPU seconds and peak RSS as a fraction
    // of Kafka Streams' (targets: at most 1/3 and 1/4).
    let row = |name: &str| rows.iter().find(|s| s.system == name && s.failed.is_none());
    for ks in ["kafka-streams-rocksdb", "kafka-streams-memory"] {
        if let (Some(c), Some(k)) = (row("cojoin-rust"), row(ks)) {
            println!(
                "CPU seconds cojoin-rust / {ks}: {:.2} (target <= 0.33); peak RSS: {:.2} (target <= 0.25)",
                c.cpu_seconds / k.cpu_seconds,
                c.peak_rss_mib / k.peak_rss_mib
            );
        }
    }
}

/// The median bytes each cojoin system's runs added to the output topic's log segments: what
/// `output.compression` saves on the broker's disk (and on the wire).
fn report_output_bytes(output_bytes: &[(&str, Vec<f64>)]) {
    if output_bytes.is_empty() {
        return;
    }
    let mib = |system: &str| {
        output_bytes
            .iter()
            .find(|(s, _)| *s == system)
            .and_then(|(_, runs)| summary::median(runs))
            .map(|bytes| bytes / f64::from(1 << 20))
    };
    let each: Vec<String> = output_bytes
        .iter()
        .filter_map(|(system, _)| Some(format!("{system} {:.1} MiB", mib(system)?)))
        .collect();
    println!(
        "\noutput topic bench-out on disk, added per run (median): {}",
        each.join(", ")
    );
    if let (Some(zstd), Some(plain)) = (mib("cojoin-rust-zstd"), mib("cojoin-rust")) {
        println!(
            "bytes on disk cojoin-rust-zstd / cojoin-rust: {:.2}",
            zstd / plain
        );
    }
}

/// `machine: nproc N, MODEL` (the model from /proc/cpuinfo, when it names one).
fn machine() -> String {
    let nproc = Command::new("nproc")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<usize>().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .map_or("?".to_owned(), |n| n.to_string());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| cpu_model(&info));
    match model {
        Some(model) => format!("machine: nproc {nproc}, {model}"),
        None => format!("machine: nproc {nproc}"),
    }
}

/// The median records/s of every system that never failed, the bare consumer in the highlight
/// colour as the limit; the failed ones are named in the title.
fn chart_svg(rows: &[Summary], records: u64, runs: u64) -> String {
    let bars: Vec<Bar> = rows
        .iter()
        .filter(|s| s.failed.is_none())
        .map(|s| Bar {
            label: if s.system == BARE {
                format!("{BARE} (the limit)")
            } else {
                s.system.clone()
            },
            value: s.rate,
            highlight: s.system == BARE,
        })
        .collect();
    let failed: Vec<&str> = rows
        .iter()
        .filter(|s| s.failed.is_some())
        .map(|s| s.system.as_str())
        .collect();
    let mut title = format!("join throughput: {records} records per topic, median of {runs} runs");
    if !failed.is_empty() {
        title.push_str(&format!("; failed: {}", failed.join(", ")));
    }
    bar_chart_svg(&title, "records/s (first record to last)", &bars)
}
