//! Operating a running host on Apache Kafka: `/metrics` moving as records flow, plugin swaps under load by
//! file drop and by `PUT /plugins` (a broken upload refused), and a graceful shutdown that hands
//! the tasks to the other host without waiting for a session timeout.

use std::path::Path;
use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config, wait_for_stable_group, HostProcess};
use cojoin_e2e::http::{get, request, sample};
use cojoin_e2e::scenario::{
    close_windows, join_broker, read_all_outcomes, run_dir, serial, start_hosts, start_hosts_with,
    PARTITIONS,
};
use cojoin_e2e::{plugin, stream};

/// Polls `url` until `done(page)` holds; panics with the last page after `timeout`.
fn metrics_until(url: &str, timeout: Duration, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let page = get(&format!("{url}/metrics")).body;
        if done(&page) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen after {timeout:?}:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn value(page: &str, name: &str) -> f64 {
    sample(page, name).unwrap_or_else(|| panic!("no sample {name} in:\n{page}"))
}

fn produce_and_close_windows(kafka: &Kafka, orders: std::ops::Range<u32>) {
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(orders.start, orders.end), None);
    close_windows(kafka, &producer);
}

#[test]
fn metrics_move_as_records_flow_and_health_answers() {
    let _serial = serial();
    let dir = run_dir("metrics_move_as_records_flow_and_health_answers");
    let kafka = join_broker(&dir);
    let hosts = start_hosts(&dir, &kafka, "metrics", 1);
    let url = hosts[0].admin_url(Duration::from_secs(30));
    assert_eq!(get(&format!("{url}/healthz")).status, 200);
    for method in ["POST", "DELETE", "PUT"] {
        let reply = request(method, &format!("{url}/healthz"), b"");
        assert_eq!(reply.status, 405, "{method} /healthz: {}", reply.body);
    }
    wait_for_stable_group(&[&hosts[0]], PARTITIONS, Duration::from_secs(60));
    let before = metrics_until(&url, Duration::from_secs(10), "6 tasks", |p| {
        sample(p, "cojoin_assigned_tasks") == Some(6.0)
    });
    assert_eq!(value(&before, "cojoin_matches_total"), 0.0);
    assert_eq!(get(&format!("{url}/readyz")).status, 200);

    produce_and_close_windows(&kafka, 0..200);
    // 200 orders, 150 payments, 6 ticks; 150 matches; 50 unpaid orders expire.
    let page = metrics_until(
        &url,
        Duration::from_secs(60),
        "every record and outcome counted",
        |p| {
            sample(p, "cojoin_matches_total") == Some(150.0)
            && sample(p, "cojoin_expiries_total") == Some(50.0)
            && sample(p, "cojoin_records_consumed_total{topic=\"payments\"}") == Some(156.0)
            && sample(p, "cojoin_records_produced_total") == Some(200.0)
            // Lag is recomputed every 2 s, from the consumer's positions.
            && sample(p, "cojoin_consumer_lag{task=\"0\",side=\"left\"}") == Some(0.0)
        },
    );
    assert_eq!(
        value(&page, "cojoin_records_consumed_total{topic=\"orders\"}"),
        200.0
    );
    assert_eq!(
        value(&page, "cojoin_records_consumed_total{topic=\"payments\"}"),
        156.0
    );
    assert_eq!(value(&page, "cojoin_records_produced_total"), 200.0);
    assert_eq!(value(&page, "cojoin_rebalances_total"), 1.0);
    let plugin_label = page
        .lines()
        .find_map(|l| l.strip_prefix("cojoin_plugin_call_seconds_count{plugin=\""))
        .and_then(|rest| rest.split_once("\"} "))
        .unwrap_or_else(|| panic!("no plugin call count in:\n{page}"));
    assert!(
        plugin_label.0.starts_with("order_paid_rust@"),
        "{plugin_label:?}"
    );
    assert_eq!(
        plugin_label.1.parse::<f64>().unwrap(),
        200.0,
        "one call per match and expiry"
    );
    // Each task still holds the ticks' window worth of state: gauges per task are exported.
    let held: f64 = (0..PARTITIONS)
        .map(|p| value(&page, &format!("cojoin_state_events{{task=\"{p}\"}}")))
        .sum();
    assert!(held >= 6.0, "the ticks are held in state: {held}");
    eprintln!("{page}");
}

/// Replaces `target` by `source` the way a deploy does: written next to it, then renamed over it.
fn drop_file(source: &Path, target: &Path) {
    let tmp = target.with_extension("wasm.tmp");
    std::fs::copy(source, &tmp).unwrap();
    std::fs::rename(&tmp, target).unwrap();
}

/// The plugin that produced each output, in order ("rust", "python").
fn producers(reader: &cojoin_e2e::broker::Reader) -> Vec<String> {
    reader
        .records
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.value).unwrap();
            body["by"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

#[test]
fn plugins_swap_under_load_by_file_drop_and_upload_without_a_lost_or_repeated_call() {
    let _serial = serial();
    let dir =
        run_dir("plugins_swap_under_load_by_file_drop_and_upload_without_a_lost_or_repeated_call");
    let kafka = join_broker(&dir);
    let live = dir.join("plugin.wasm");
    std::fs::copy(plugin("order_paid_rust.wasm"), &live).unwrap();
    // The result set is exact, so it must not depend on how fast the machine is: the loader's
    // event time runs 25 s per second of wall clock, and a payment read up to 120 s of event time
    // (~5 s of wall clock) behind its order on a busy machine still joins it (with no grace,
    // order-447 expired unpaid once under load).
    let config = join_config(&kafka.bootstrap, "swaps", &live, "left").replace(
        "max_idle = \"1s\"\n",
        "max_idle = \"1s\"\ngrace = \"120s\"\n",
    );
    assert!(config.contains("grace"), "{config}");
    let hosts = start_hosts_with(&dir, 2, &config);
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&refs, PARTITIONS, Duration::from_secs(90));
    let assignments_before: Vec<usize> = hosts.iter().map(|h| h.assignments().len()).collect();
    let urls: Vec<String> = hosts
        .iter()
        .map(|h| h.admin_url(Duration::from_secs(10)))
        .collect();
    let sha = |url: &str| -> String {
        let body: serde_json::Value =
            serde_json::from_str(&get(&format!("{url}/plugins")).body).unwrap();
        body["sha256"].as_str().unwrap().to_owned()
    };
    let rust_sha = sha(&urls[0]);

    // Continuous load on a thread while the plugin changes: 5 orders every 200 ms until stopped.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loader = {
        let (bootstrap, stop) = (kafka.bootstrap.clone(), stop.clone());
        std::thread::spawn(move || {
            let producer = Kafka::producer_for(&bootstrap, "murmur2_random");
            let mut from = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                Kafka::produce_with(&producer, &stream::orders(from, from + 5), None);
                from += 5;
                std::thread::sleep(Duration::from_millis(200));
            }
            from
        })
    };
    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until("first rust outputs", Duration::from_secs(60), |r| {
        r.len() >= 50
    });

    // 1. Python by file drop: both hosts watch the file.
    drop_file(&plugin("order_paid_python.wasm"), &live);
    outputs.read_until("python outputs", Duration::from_secs(120), |r| {
        r.iter()
            .rev()
            .take(20)
            .all(|r| r.value.contains("\"by\":\"python\""))
    });
    // /healthz is polled all through the uploads: it must answer at once while they compile.
    let polling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let poller = {
        let (url, polling) = (urls[0].clone(), polling.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            while polling.load(std::sync::atomic::Ordering::Relaxed) {
                let started = std::time::Instant::now();
                assert_eq!(get(&format!("{url}/healthz")).status, 200);
                slowest = slowest.max(started.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            slowest
        })
    };
    // 2. Back to Rust by upload to each host, named by the uploaded file.
    for url in &urls {
        let reply = request(
            "PUT",
            &format!("{url}/plugins/order-paid-rust.wasm"),
            &std::fs::read(plugin("order_paid_rust.wasm")).unwrap(),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(reply.body.contains(&rust_sha), "{}", reply.body);
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["name"], "order-paid-rust", "{}", reply.body);
        // plugin.path is a file here: the upload is not written anywhere, and the reply says so.
        assert_eq!(body["persisted"], false, "{}", reply.body);
        assert!(
            body["note"].as_str().unwrap().contains("restarts"),
            "{}",
            reply.body
        );
    }
    // 3. A broken upload is refused, naming the upload and the version that keeps serving.
    for url in &urls {
        let reply = request(
            "PUT",
            &format!("{url}/plugins/broken.wasm"),
            b"\0asm garbage, not a component",
        );
        assert_eq!(reply.status, 422, "{}", reply.body);
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("plugin broken "),
            "{}",
            reply.body
        );
        assert!(
            body["running"]
                .as_str()
                .unwrap()
                .starts_with(&format!("order-paid-rust@{}", &rust_sha[..12])),
            "names the version still running: {}",
            reply.body
        );
    }
    polling.store(false, std::sync::atomic::Ordering::Relaxed);
    let slowest = poller.join().unwrap();
    eprintln!("slowest /healthz during the uploads: {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // Some more load after the last swap, then the windows close.
    let served = outputs.records.len();
    outputs.read_until("outputs after the swaps", Duration::from_secs(60), |r| {
        r.len() >= served + 100
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let orders = loader.join().unwrap();
    close_windows(&kafka, &kafka.producer("murmur2_random"));

    let tally = read_all_outcomes(&kafka, &stream::expected(orders));
    let mut all = kafka.reader("orders-paid", 1);
    all.read_until("every output", Duration::from_secs(30), |r| {
        r.len() >= tally.outputs
    });
    let by = producers(&all);
    let switches: Vec<&str> = by.iter().map(String::as_str).fold(Vec::new(), |mut v, b| {
        if v.last() != Some(&b) {
            v.push(b);
        }
        v
    });
    eprintln!(
        "swaps under load: {orders} orders, {} outputs, {} matches, {} expiries, duplicates {}; plugins in order {switches:?}",
        tally.outputs, tally.matches, tally.expiries, tally.duplicates
    );
    assert!(tally.complete(), "{tally:?}");
    assert_eq!(tally.duplicates, 0, "a swap repeated a call: {tally:?}");
    assert!(by.iter().any(|b| b == "python"), "python served some calls");
    assert_eq!(
        by.last().map(String::as_str),
        Some("rust"),
        "rust serves at the end"
    );

    for (h, url) in hosts.iter().zip(&urls) {
        let page = get(&format!("{url}/metrics")).body;
        assert_eq!(
            value(&page, "cojoin_plugin_swaps_total"),
            2.0,
            "{}: {page}",
            h.name
        );
        assert_eq!(
            value(&page, "cojoin_plugin_swaps_refused_total"),
            1.0,
            "{}",
            h.name
        );
        assert_eq!(sha(url), rust_sha, "{}", h.name);
    }
    // The group never rebalanced: no host logged an assignment after the group formed.
    let assignments_after: Vec<usize> = hosts.iter().map(|h| h.assignments().len()).collect();
    assert_eq!(assignments_before, assignments_after);
}

#[test]
fn a_terminated_host_commits_and_leaves_and_the_other_takes_over_without_a_session_timeout() {
    let _serial = serial();
    let dir = run_dir(
        "a_terminated_host_commits_and_leaves_and_the_other_takes_over_without_a_session_timeout",
    );
    let kafka = join_broker(&dir);
    // A session timeout far longer than the takeover may take: only a LeaveGroup explains a quick one.
    let config = join_config(
        &kafka.bootstrap,
        "leave",
        &plugin("order_paid_rust.wasm"),
        "left",
    )
    .replace(
        "\"session.timeout.ms\" = \"6000\"",
        "\"session.timeout.ms\" = \"45000\"",
    )
    .replace(
        "\"max.poll.interval.ms\" = \"10000\"",
        "\"max.poll.interval.ms\" = \"60000\"",
    );
    let mut hosts = start_hosts_with(&dir, 2, &config);
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    wait_for_stable_group(&refs, PARTITIONS, Duration::from_secs(90));
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, 300), None);
    let mut outputs = kafka.reader("orders-paid", 1);
    outputs.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 100);

    let t = Instant::now();
    hosts[0].terminate();
    let (status, log) = hosts[0].wait_exit(Duration::from_secs(20));
    let exited = t.elapsed();
    assert!(status.success(), "exit status {status:?}:\n{log}");
    assert!(log.contains("left the group"), "{log}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while hosts[1].assignments().last().map(|(l, _)| l.len()) != Some(PARTITIONS as usize) {
        assert!(
            Instant::now() < deadline,
            "host-1 did not take every task: {:?}",
            hosts[1].assignments()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let takeover = t.elapsed();
    eprintln!(
        "host-0 exited after {exited:?}; host-1 held all {PARTITIONS} tasks after {takeover:?}"
    );
    assert!(
        takeover < Duration::from_secs(30),
        "took over in {takeover:?}, near the 45 s session timeout"
    );

    produce_and_close_windows(&kafka, 300..600);
    let tally = read_all_outcomes(&kafka, &stream::expected(600));
    eprintln!(
        "after the handover: matches {}, expiries {}, duplicates {}",
        tally.matches, tally.expiries, tally.duplicates
    );
    assert!(tally.complete(), "{tally:?}");
    // A handover commits what was processed before leaving: the new owner repeats nothing.
    assert_eq!(
        tally.duplicates, 0,
        "a graceful handover repeated outcomes: {tally:?}"
    );
}
