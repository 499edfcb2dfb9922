//! A `cojoin run` of the benchmark: its config (plugin, join kind, window, BENCH_WORKERS,
//! BENCH_MEMORY), its throughput from the admin API's `/metrics` until every record is consumed
//! and every expected match made, then SIGTERM, and its CPU and peak RSS from GNU time.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cojoin_e2e::cojoin_bin;
use cojoin_e2e::hosts::logged_admin_url;
use cojoin_e2e::http::{get, sample};

use super::summary::Figures;
use super::timing::gnu_time;
use super::{data_set, grace_ms, join_kind, topics, window_ms, DataSet, PARTITIONS};

/// A left join reports every order in no match once its window closes: each key has one order,
/// so those are the orders (the first topic's share of the records) less the matches.
/// In a table join every order finds its row: no expiry.
pub(crate) fn expected_expiries(total: u64, matches: u64) -> u64 {
    match join_kind().as_str() {
        "left" if data_set() != DataSet::Table => total / topics().len() as u64 - matches,
        _ => 0,
    }
}

/// The `[join]` lines naming the data set's topics and its window: `left` and `right`, or
/// `topics` for three; for a table join only the stream, `left` (the system's `[join]` settings
/// add the table) and no window.
fn join_topics() -> String {
    let window = format!(
        "window = \"{}ms\"\ngrace = \"{}ms\"",
        window_ms(),
        grace_ms()
    );
    match topics() {
        [left, _] if data_set() == DataSet::Table => format!("left = \"{left}\""),
        [left, right] => format!("left = \"{left}\"\nright = \"{right}\"\n{window}"),
        all => {
            let quoted: Vec<String> = all.iter().map(|t| format!("\"{t}\"")).collect();
            format!("topics = [{}]\n{window}", quoted.join(", "))
        }
    }
}

/// `cojoin run` on the data set: throughput from its `/metrics` (first record consumed to the
/// last), then SIGTERM, and CPU and peak RSS from GNU time.
pub(crate) fn cojoin_run(
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
{}
[join]
{}
kind = "{}"
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
            std::env::var("BENCH_KAFKA_OPTIONS").unwrap_or_default(),
            join_topics(),
            join_kind(),
            wasm.display(),
            workers_line(),
            std::env::var("BENCH_MEMORY").unwrap_or_default(),
        ),
    )
    .unwrap();
    let log = dir.join(format!("{tag}.log"));
    let child = spawn_cojoin(dir, &tag, &config);
    let url = admin_url(&log);
    // From the first record consumed until every record is consumed and every expected match
    // made (or, when matches fall short, until they stop moving for 5 s: the table flags it).
    let (mut first, mut last) = (None, None);
    let mut page = String::new();
    let mut seen = (0.0, 0.0, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        page = get(&format!("{url}/metrics")).body;
        let mut consumed: f64 = topics()
            .iter()
            .map(|t| {
                sample(
                    &page,
                    &format!("cojoin_records_consumed_total{{topic=\"{t}\"}}"),
                )
                .unwrap_or(0.0)
            })
            .sum();
        // A global table is read by the host's table reader, not the group's consumer.
        if system.ends_with("-global") {
            consumed += sample(&page, "cojoin_table_updates_total").unwrap_or(0.0);
        }
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
    // The last page beside the log: what the run did (pauses, end-offset asks, rounds).
    std::fs::write(dir.join(format!("{tag}.metrics")), &page).unwrap();
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
    let (cpu_seconds, peak_rss_mib) = stop_cojoin(child, dir, &tag);
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

/// `cojoin run --config <config>` under GNU time (and perf, with BENCH_PERF=1), its JSON log in
/// `<dir>/<tag>.log`, GNU time's line in `<dir>/<tag>.time`.
pub(crate) fn spawn_cojoin(dir: &Path, tag: &str, config: &Path) -> Child {
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
    command
        .arg(cojoin_bin())
        .args(["--log-format", "json", "run", "--config"])
        .arg(config)
        .env("COJOIN_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{tag}.log"))).unwrap())
        .spawn()
        .unwrap()
}

/// SIGTERM to cojoin itself (the child of GNU time), which then reports its usage: (CPU
/// seconds, peak RSS MiB).
pub(crate) fn stop_cojoin(mut child: Child, dir: &Path, tag: &str) -> (f64, f64) {
    let status = Command::new("pkill")
        .args(["-TERM", "-P", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "no cojoin process under GNU time");
    let _ = child.wait();
    let time = std::fs::read_to_string(dir.join(format!("{tag}.time"))).unwrap_or_default();
    gnu_time(&time)
}

pub(crate) fn admin_url(log: &Path) -> String {
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
pub(crate) fn workers_line() -> String {
    std::env::var("BENCH_WORKERS")
        .map(|n| format!("workers = {n}"))
        .unwrap_or_default()
}
