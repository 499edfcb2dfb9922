//! What the benchmark prints and draws at the end: the table of medians with the machine and
//! the ratios the project targets, the output topic's bytes on disk per cojoin system, and the
//! SVG bar chart of the median records/s.

use std::process::Command;

use cojoin_e2e::plot::{bar_chart_svg, Bar};

use super::summary::{self, cpu_model, table, Summary};
use super::{data_set, env_or, grace_ms, window_ms, DataSet, BARE};

/// `data`: what was joined (the records per topic, or the stream and the table).
pub(crate) fn report(rows: &[Summary], data: &str, expected: u64, runs: u64) {
    let window = match data_set() {
        DataSet::Table => "no window (a table join)".to_owned(),
        _ => format!("window {} ms, grace {} ms", window_ms(), grace_ms()),
    };
    println!(
        "\njoin benchmark: {data}, {}-byte values, {window}; expected matches {expected}; median of {runs} runs",
        env_or("BENCH_VALUE_BYTES", 100),
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
    // Three topics (issue 32): three times Kafka Streams' chained joins, and ahead of Flink's.
    // The table data set's targets are its own (join/table.rs).
    let ratios: &[(&str, &str, f64)] = match data_set() {
        DataSet::Table => &[],
        DataSet::Three => &[
            ("cojoin-rust", "kafka-streams-rocksdb", 3.0),
            ("cojoin-rust", "kafka-streams-memory", 3.0),
            ("cojoin-rust", "flink", 1.0),
        ],
        DataSet::Pair => &[
            ("cojoin-rust", BARE, 0.7),
            ("cojoin-rust", "kafka-streams-rocksdb", 2.0),
            ("cojoin-rust", "kafka-streams-memory", 2.0),
            ("cojoin-python", "quixstreams", 5.0),
            ("cojoin-python", "python-handwritten", 1.0),
            ("cojoin-python", "python-handwritten-producing", 1.0),
        ],
    };
    for &(a, b, target) in ratios {
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
pub(crate) fn report_output_bytes(output_bytes: &[(&str, Vec<f64>)]) {
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
pub(crate) fn machine() -> String {
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
pub(crate) fn chart_svg(rows: &[Summary], records: u64, runs: u64) -> String {
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
    let data = match data_set() {
        DataSet::Pair => format!("{records} records per topic"),
        DataSet::Three => format!("{records} records per topic of three topics"),
        DataSet::Table => format!("{records} stream records joined with a table"),
    };
    let mut title = format!("join throughput: {data}, median of {runs} runs");
    if !failed.is_empty() {
        title.push_str(&format!("; failed: {}", failed.join(", ")));
    }
    bar_chart_svg(&title, "records/s (first record to last)", &bars)
}
