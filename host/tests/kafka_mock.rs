//! `cojoin run` against librdkafka's in-process mock cluster: every match and expiry reaches the
//! output topic, a graceful restart in the middle of the stream repeats none and loses none.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cojoin::config::Config;
use cojoin::plugin::{EngineOptions, PluginEngine, PluginLimits, PluginRegistry};
use cojoin::run::Host;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use rdkafka::ClientConfig;

#[path = "support/mod.rs"]
mod support;
use support::plugin_path;

#[path = "kafka_mock/table.rs"]
mod table;

const BASE_TS: i64 = 1_764_680_400_000;
const PARTITIONS: i32 = 4;

/// The classic protocol's fast group settings (auto picks classic with them).
const CLASSIC: &str = r#"
        [kafka.options]
        "session.timeout.ms" = "6000"
        "heartbeat.interval.ms" = "500""#;

fn config(bootstrap: &str, group: &str, group_settings: &str) -> Config {
    Config::parse(&format!(
        r#"
        [kafka]
        bootstrap_servers = "{bootstrap}"
        group_id = "{group}"
        {group_settings}
        [join]
        left = "orders"
        right = "payments"
        kind = "left"
        window = "10s"
        max_idle = "100ms"
        [plugin]
        path = "unused.wasm"
        [output]
        topic = "orders-paid"
        dead_letter_topic = "dlq"
        "#
    ))
    .unwrap()
}

struct RunningHost {
    shutdown: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
    metrics: Arc<cojoin::metrics::Metrics>,
}

fn start_host(bootstrap: &str, group: &str) -> RunningHost {
    start_host_with(bootstrap, group, CLASSIC)
}

fn start_host_with(bootstrap: &str, group: &str, group_settings: &str) -> RunningHost {
    start_host_config(config(bootstrap, group, group_settings))
}

fn start_host_config(config: Config) -> RunningHost {
    let engine = PluginEngine::new(EngineOptions {
        cache_dir: Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")),
        ..EngineOptions::default()
    })
    .unwrap();
    let registry = PluginRegistry::from_file(
        engine,
        &plugin_path("order_paid_rust.wasm"),
        PluginLimits::default(),
        vec![],
    )
    .unwrap();
    let host = Host::new(config, registry);
    let metrics = host.metrics.clone();
    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    let thread = std::thread::spawn(move || host.run(&flag));
    RunningHost {
        shutdown,
        thread,
        metrics,
    }
}

impl RunningHost {
    /// Asks the host to stop and waits (at most 60 s) for it to commit and leave.
    fn stop(self) {
        self.shutdown.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self.thread.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the host did not stop within 60 s of its shutdown flag"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.thread
            .join()
            .unwrap()
            .expect("the host ran without error");
    }
}

fn producer(bootstrap: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // The same partitioner for both topics, as the join requires.
        .set("partitioner", "murmur2_random")
        .create()
        .unwrap()
}

fn send(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    key: &str,
    value: &str,
    ts: i64,
    partition: Option<i32>,
) {
    let mut record = BaseRecord::to(topic).key(key).payload(value).timestamp(ts);
    record.partition = partition;
    p.send(record).map_err(|(e, _)| e).unwrap();
}

/// Orders `from..to`; a payment 2 s later for three orders out of four.
fn produce_orders(p: &ThreadedProducer<DefaultProducerContext>, from: i64, to: i64) {
    for i in from..to {
        let key = format!("order-{i}");
        send(
            p,
            "orders",
            &key,
            &format!("{{\"n\":{i}}}"),
            BASE_TS + i * 1000,
            None,
        );
        if i % 4 != 0 {
            send(
                p,
                "payments",
                &key,
                &format!("{{\"for\":{i}}}"),
                BASE_TS + i * 1000 + 2000,
                None,
            );
        }
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

/// Reads the output topic from the start until `done` says so (or 60 s pass).
fn read_outputs(
    bootstrap: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{}", std::process::id()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    // Assigned, not subscribed: no group to join, so readers never wait for one another.
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("orders-paid", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    while !done(&out) {
        assert!(
            Instant::now() < deadline,
            "outputs incomplete after 60 s: {} read",
            out.len()
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let body: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            out.push((
                body["order_id"].as_str().unwrap().to_owned(),
                body["status"].as_str().unwrap().to_owned(),
            ));
        }
    }
    out
}

/// A mock cluster with the joined topics, the output topic and the dead-letter topic.
fn join_cluster() -> (MockCluster<'static, DefaultProducerContext>, String) {
    join_cluster_of(1)
}

/// [`join_cluster`] on `brokers` brokers (partition leaders as the mock spreads them).
fn join_cluster_of(brokers: i32) -> (MockCluster<'static, DefaultProducerContext>, String) {
    let cluster = MockCluster::new(brokers).unwrap();
    for topic in ["orders", "payments"] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    cluster.create_topic("orders-paid", 1, 1).unwrap();
    cluster.create_topic("dlq", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    (cluster, bootstrap)
}

/// One payment per partition far ahead in time, which closes every window.
fn produce_ticks(p: &ThreadedProducer<DefaultProducerContext>) {
    for partition in 0..PARTITIONS {
        let key = format!("tick-{partition}");
        send(
            p,
            "payments",
            &key,
            "{}",
            BASE_TS + 10_000_000,
            Some(partition),
        );
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Every order 0..200 reported with its status (unpaid for one in four), and nothing else.
fn assert_every_order_reported(outputs: &[(String, String)]) {
    let mut seen: HashMap<&str, Vec<&str>> = HashMap::new();
    for (order, status) in outputs {
        seen.entry(order).or_default().push(status);
    }
    for i in 0..200 {
        let want = if i % 4 == 0 { "unpaid" } else { "paid" };
        let got = seen
            .remove(format!("order-{i}").as_str())
            .unwrap_or_default();
        assert!(
            !got.is_empty() && got.iter().all(|s| *s == want),
            "order-{i}: {got:?}"
        );
    }
    assert!(seen.is_empty(), "unexpected outputs: {seen:?}");
}

/// Outputs that say "paid".
fn paid(outputs: &[(String, String)]) -> usize {
    outputs.iter().filter(|(_, s)| s == "paid").count()
}

/// Every one of orders 0..200 is among the outputs (duplicates aside).
fn every_order_in(outputs: &[(String, String)]) -> bool {
    outputs
        .iter()
        .collect::<std::collections::HashSet<_>>()
        .len()
        >= 200
}

/// Orders 0..100, then a host with `config`, running until 75 of them are reported paid; the
/// producer and the host.
fn host_on_first_half(
    bootstrap: &str,
    config: Config,
) -> (ThreadedProducer<DefaultProducerContext>, RunningHost) {
    let p = producer(bootstrap);
    produce_orders(&p, 0, 100);
    let host = start_host_config(config);
    read_outputs(bootstrap, |o| paid(o) >= 75);
    (p, host)
}

#[test]
fn every_match_and_expiry_is_produced_once_across_a_graceful_restart() {
    let (_cluster, bootstrap) = join_cluster();
    let group = format!("cojoin-test-{}", std::process::id());
    let p = producer(&bootstrap);

    // Phase 1: half the stream, then a graceful stop once its payments are matched.
    produce_orders(&p, 0, 100);
    let host = start_host(&bootstrap, &group);
    let t = Instant::now();
    read_outputs(&bootstrap, |o| paid(o) >= 75);
    eprintln!("phase 1 matched in {:?}", t.elapsed());
    host.stop();
    eprintln!("phase 1 stopped in {:?}", t.elapsed());

    // Phase 2: a new host takes over from the commits; the rest of the stream, then one late
    // payment per partition far ahead in time, which closes every window.
    let host = start_host(&bootstrap, &group);
    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    eprintln!("phase 2 complete in {:?}", t.elapsed());
    // Absence cannot be polled for: a duplicate would come within the next round or two, so
    // the test gives it 2 s before it re-reads.
    std::thread::sleep(Duration::from_secs(2));
    let outputs_after = read_outputs(&bootstrap, |o| o.len() >= outputs.len());
    eprintln!("re-read in {:?}", t.elapsed());
    host.stop();
    eprintln!("stopped in {:?}", t.elapsed());

    assert_every_order_reported(&outputs_after);
    assert_eq!(
        outputs_after.len(),
        200,
        "no duplicates after a graceful restart"
    );
}

fn producer_with(bootstrap: &str, partitioner: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", partitioner)
        .create()
        .unwrap()
}

#[test]
fn topics_with_different_partition_counts_are_refused_with_the_fix_when_repartitioning_is_off() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 6, 1).unwrap();
    cluster.create_topic("payments", 4, 1).unwrap();
    cluster.create_topic("orders-paid", 1, 1).unwrap();
    cluster.create_topic("dlq", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let auto = config(&bootstrap, "unequal", CLASSIC);
    let report = cojoin::check::check(&auto, 100).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(
        report.lines.iter().any(|l| l.starts_with(
            "repartitioning: payments is re-keyed into unequal-payments-repartition (6 partitions, murmur2)"
        )),
        "{report:?}"
    );

    let mut config = config(&bootstrap, "unequal", CLASSIC);
    config.join.repartition = cojoin::config::RepartitionPolicy::Never;
    let report = cojoin::check::check(&config, 100).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(
        report.problems[0]
            .starts_with("topics not co-partitioned: orders has 6 partitions, payments has 4"),
        "{report:?}"
    );

    let host = start_host_config(config);
    let err = host.thread.join().unwrap().unwrap_err();
    assert!(
        format!("{err:#}").contains("orders has 6 partitions, payments has 4"),
        "{err:#}"
    );
}

#[test]
fn check_finds_keys_that_producers_put_in_different_partitions() {
    let (_cluster, bootstrap) = join_cluster();
    // Orders from a Java-compatible producer, payments from librdkafka's default partitioner.
    let java = producer_with(&bootstrap, "murmur2_random");
    let rdkafka_default = producer_with(&bootstrap, "consistent_random");
    for i in 0..100 {
        let key = format!("order-{i}");
        send(&java, "orders", &key, "{}", BASE_TS + i, None);
        send(&rdkafka_default, "payments", &key, "{}", BASE_TS + i, None);
    }
    java.flush(Duration::from_secs(10)).unwrap();
    rdkafka_default.flush(Duration::from_secs(10)).unwrap();

    let report = cojoin::check::check(&config(&bootstrap, "check", CLASSIC), 1_000).unwrap();
    let text = format!("{report:?}");
    assert_eq!(report.problems.len(), 1, "{text}");
    assert!(
        report.problems[0].contains("different partition numbers"),
        "{text}"
    );
    assert!(
        report.problems[0].contains("partitioner=murmur2_random"),
        "{text}"
    );
    assert!(
        text.contains("orders: 100 keys sampled, partitioned by murmur2"),
        "{text}"
    );
    assert!(
        text.contains("payments: 100 keys sampled, partitioned by CRC32"),
        "{text}"
    );
}

#[test]
fn check_passes_when_both_producers_agree() {
    let (_cluster, bootstrap) = join_cluster();
    let p = producer(&bootstrap);
    produce_orders(&p, 0, 40);
    let report = cojoin::check::check(&config(&bootstrap, "check-ok", CLASSIC), 1_000).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(
        report
            .lines
            .iter()
            .any(|l| l == "30 keys found in both topics, all in the same partition number"),
        "{report:?}"
    );
}

#[test]
fn a_broker_outage_and_failing_requests_lose_no_match_or_expiry() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let (cluster, bootstrap) = join_cluster();
    let p = producer(&bootstrap);
    produce_orders(&p, 0, 100);
    let host = start_host(&bootstrap, &format!("faults-{}", std::process::id()));
    read_outputs(&bootstrap, |o| !o.is_empty());

    // The broker goes away for 3 s, then produce and commit requests fail a few times each.
    cluster.broker_down(1).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    cluster.broker_up(1).unwrap();
    let timeout = RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT;
    cluster.request_errors(RDKafkaApiKey::Produce, &[timeout; 3]);
    cluster.request_errors(RDKafkaApiKey::OffsetCommit, &[timeout; 3]);

    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    host.stop();

    assert_every_order_reported(&outputs);
    eprintln!(
        "outputs {}, duplicates {}",
        outputs.len(),
        outputs.len() - 200
    );
}

/// The value of sample `name` on a `/metrics` page.
fn sample(page: &str, name: &str) -> Option<u64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn the_counts_of_a_known_run_match_what_reached_the_topics() {
    let (_cluster, bootstrap) = join_cluster();
    let p = producer(&bootstrap);
    // 40 orders, 30 of them paid: 30 matches and, once the windows close, 10 unpaid expiries.
    produce_orders(&p, 0, 40);
    // Three orders without a key: dead letters.
    for i in 0..3 {
        let record: BaseRecord<'_, str, str> = BaseRecord::to("orders")
            .payload("{}")
            .timestamp(BASE_TS + i * 1000);
        p.send(record).map_err(|(e, _)| e).unwrap();
    }
    produce_ticks(&p);
    let host = start_host(&bootstrap, &format!("counts-{}", std::process::id()));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 40);
    let paid = outputs.iter().filter(|(_, s)| s == "paid").count();
    let distinct: std::collections::HashSet<_> = outputs.iter().map(|(o, _)| o).collect();
    assert_eq!((paid, distinct.len()), (30, 40), "{outputs:?}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        let page = host.metrics.render();
        let done = sample(&page, "cojoin_outputs_produced_total") == Some(40)
            && sample(&page, "cojoin_dead_letters_produced_total") == Some(3)
            && sample(&page, "cojoin_commits_total").is_some_and(|n| n >= 1);
        if done {
            break page;
        }
        assert!(Instant::now() < deadline, "counts not reached:\n{page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    host.stop();
    for (name, want) in [
        ("cojoin_matches_total", 30),
        ("cojoin_expiries_total", 10),
        ("cojoin_null_key_records_total", 3),
        ("cojoin_dead_lettered_records_total", 3),
        ("cojoin_records_produced_total", 43),
        ("cojoin_refused_outputs_total", 0),
        ("cojoin_commit_failures_total", 0),
        // One host alone in its group: one assignment, every task started once, none moved.
        ("cojoin_rebalances_total", 1),
        ("cojoin_tasks_assigned_total", PARTITIONS as u64),
        ("cojoin_tasks_revoked_total", 0),
        ("cojoin_tasks_halted_total", 0),
        ("cojoin_delivery_retries_total", 0),
    ] {
        assert_eq!(sample(&page, name), Some(want), "{name}:\n{page}");
    }
    // Every output the broker acknowledged is on the output topic, and no more.
    assert_eq!(outputs.len(), 40, "{outputs:?}");
}

#[test]
fn a_backlog_larger_than_memory_queue_bytes_is_paused_and_resumed_without_loss() {
    let (_cluster, bootstrap) = join_cluster();
    let p = producer(&bootstrap);
    // 1,200 orders and 900 payments of ~8 KiB each (~17 MB) before the host starts, against a
    // 4 MiB budget: 256 KiB for librdkafka's prefetch, 512 KiB polled ahead during a round,
    // 3.25 MiB over 4 tasks and 2 sides, 416 KiB per side (task/backpressure.rs). The bulk is in
    // a header, which the plugin does not copy into its outputs (the mock broker keeps 5 MB per
    // partition).
    let pad = vec![b'x'; 8 * 1024];
    let send_padded = |topic: &str, key: &str, value: &str, ts: i64| {
        let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
            key: "pad",
            value: Some(&pad),
        });
        let record = BaseRecord::to(topic)
            .key(key)
            .payload(value)
            .timestamp(ts)
            .headers(headers);
        p.send(record).map_err(|(e, _)| e).unwrap();
    };
    for i in 0..1_200i64 {
        let key = format!("order-{i}");
        let ts = BASE_TS + i * 1000;
        send_padded("orders", &key, &format!("{{\"n\":{i}}}"), ts);
        if i % 4 != 0 {
            send_padded("payments", &key, &format!("{{\"for\":{i}}}"), ts + 2000);
        }
    }
    produce_ticks(&p);
    let mut cfg = config(
        &bootstrap,
        &format!("backlog-{}", std::process::id()),
        CLASSIC,
    );
    cfg.memory.queue_bytes = 4 << 20;
    let host = start_host_config(cfg);
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 1_200);
    let page = wait_for_page(&host, "every output acknowledged", |page| {
        sample(page, "cojoin_outputs_produced_total") == Some(1_200)
    });
    host.stop();
    let distinct: std::collections::HashSet<_> = outputs.iter().map(|(o, _)| o).collect();
    assert_eq!(
        (outputs.len(), distinct.len(), paid(&outputs)),
        (1_200, 1_200, 900)
    );
    let pauses = sample(&page, "cojoin_backpressure_pauses_total").unwrap();
    assert!(pauses > 0, "the backlog never filled a queue:\n{page}");
    // A side pauses on the record that takes it past its share (records polled ahead for a side
    // paused meanwhile are fetched again later): no queue ever held more than
    // 2 x (the share + one record).
    let share = cojoin::task::backpressure::QueueMarks::new(4 << 20, 4, 2).high;
    assert_eq!(share, 416 * 1024);
    let bound = 2 * (share as u64 + 9 * 1024);
    let peaks: Vec<u64> = page
        .lines()
        .filter(|l| l.starts_with("cojoin_queue_peak_bytes{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(peaks.len(), PARTITIONS as usize, "{page}");
    assert!(
        peaks.iter().all(|&peak| peak > 0 && peak <= bound),
        "queue peaks {peaks:?} past {bound}"
    );
}

/// A mock cluster like [`join_cluster`]'s whose KIP-848 coordinator asks for a heartbeat every
/// 200 ms (the mock's default is 3 s, so every partition move would take seconds). rdkafka's
/// `MockCluster` keeps its handle private, so the cluster is made through a client's
/// `test.mock.num.brokers`; the returned client owns it.
fn new_protocol_cluster() -> (BaseProducer, String) {
    use rdkafka::bindings as rd;
    let owner: BaseProducer = ClientConfig::new()
        .set("test.mock.num.brokers", "1")
        .create()
        .unwrap();
    // SAFETY: the mock cluster lives as long as `owner`, which the caller keeps; the strings are
    // NUL-terminated locals.
    let bootstrap = unsafe {
        let mock = rd::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
        assert!(!mock.is_null());
        for (topic, partitions) in [
            ("orders", PARTITIONS),
            ("payments", PARTITIONS),
            ("orders-paid", 1),
            ("dlq", 1),
        ] {
            let name = std::ffi::CString::new(topic).unwrap();
            let err = rd::rd_kafka_mock_topic_create(mock, name.as_ptr(), partitions, 1);
            assert_eq!(err, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
        }
        rd::rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(mock, 200);
        rd::rd_kafka_mock_set_group_consumer_session_timeout_ms(mock, 3_000);
        std::ffi::CStr::from_ptr(rd::rd_kafka_mock_cluster_bootstraps(mock))
            .to_string_lossy()
            .into_owned()
    };
    (owner, bootstrap)
}

/// What a scale-out from one host to two did to the first host.
struct ScaleOut {
    /// Tasks the first host started (its own four, and again those it restarted).
    assigned: u64,
    revoked: u64,
}

/// One host runs half the stream; a second joins; the rest of the stream; every order must be
/// reported. Returns the first host's task counts.
fn scale_out(bootstrap: &str, group_settings: &str, protocol: &str) -> ScaleOut {
    let group = format!("scale-{protocol}-{}", std::process::id());
    let p = producer(bootstrap);
    produce_orders(&p, 0, 100);
    let first = start_host_with(bootstrap, &group, group_settings);
    read_outputs(bootstrap, |o| paid(o) >= 75);
    let page = first.metrics.render();
    let running = format!("cojoin_group_protocol{{protocol=\"{protocol}\"}} 1");
    assert!(page.contains(&running), "{page}");

    let second = start_host_with(bootstrap, &group, group_settings);
    // The group settles when each host holds two tasks and no half waits for its pair.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let [a, b] = [&first, &second].map(|h| h.metrics.render());
        let settled = [&a, &b].iter().all(|page| {
            sample(page, "cojoin_assigned_tasks") == Some(2)
                && sample(page, "cojoin_tasks_waiting_for_pair") == Some(0)
        });
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle:\n{a}\n{b}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(bootstrap, every_order_in);
    assert_every_order_reported(&outputs);
    let page = first.metrics.render();
    second.stop();
    first.stop();
    ScaleOut {
        assigned: sample(&page, "cojoin_tasks_assigned_total").unwrap(),
        revoked: sample(&page, "cojoin_tasks_revoked_total").unwrap(),
    }
}

#[test]
fn under_the_new_protocol_a_host_that_gains_a_peer_keeps_the_tasks_it_keeps() {
    let (_cluster, bootstrap) = new_protocol_cluster();
    let figures = scale_out(&bootstrap, r#"group_protocol = "consumer""#, "consumer");
    // Four tasks, then two of them move to the new host: the two that stay are never restarted.
    assert_eq!((figures.assigned, figures.revoked), (4, 2));
}

#[test]
fn under_the_classic_protocol_a_host_that_gains_a_peer_restarts_every_task() {
    let (_cluster, bootstrap) = join_cluster();
    let figures = scale_out(&bootstrap, CLASSIC, "classic");
    // Eager: all four revoked, then the two it keeps started again: (6, 4) when the group
    // settles in one rebalance. On a busy machine the second host may join after a first round
    // that gave all four back to the first: (10, 8) seen once in CI. Either way it ends holding
    // two, and the two it kept were revoked too (under the new protocol only the two that
    // moved are).
    let (assigned, revoked) = (figures.assigned, figures.revoked);
    assert_eq!(
        assigned - revoked,
        2,
        "{assigned} assigned, {revoked} revoked"
    );
    assert!(revoked >= 4, "{assigned} assigned, {revoked} revoked");
}

#[test]
fn auto_runs_the_classic_protocol_where_the_broker_does_not_say_it_enables_the_new_one() {
    // The mock cluster answers no DescribeConfigs.
    let (_cluster, bootstrap) = join_cluster();
    let t = Instant::now();
    let host = start_host_with(&bootstrap, &format!("auto-{}", std::process::id()), "");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !host
        .metrics
        .render()
        .contains("cojoin_group_protocol{protocol=\"classic\"} 1")
    {
        assert!(Instant::now() < deadline, "{}", host.metrics.render());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("protocol chosen in {:?}", t.elapsed());
    host.stop();
}

/// Gives `member` of `group` exactly `partitions` (the mock's manual target assignment, as a
/// broker moving partitions one at a time would).
fn assign_exactly(owner: &BaseProducer, group: &str, member: &str, partitions: &[(&str, i32)]) {
    use rdkafka::bindings as rd;
    let group = std::ffi::CString::new(group).unwrap();
    let member = std::ffi::CString::new(member).unwrap();
    // SAFETY: the mock cluster lives as long as `owner`; every list and string is valid for the
    // calls, which copy what they keep; what is created here is destroyed here.
    unsafe {
        let mock = rd::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
        let mut list = rd::rd_kafka_topic_partition_list_new(partitions.len() as i32);
        for (topic, p) in partitions {
            let topic = std::ffi::CString::new(*topic).unwrap();
            rd::rd_kafka_topic_partition_list_add(list, topic.as_ptr(), *p);
        }
        let mut members = [member.as_ptr() as *mut std::ffi::c_char];
        let target = rd::rd_kafka_mock_cgrp_consumer_target_assignment_new(
            members.as_mut_ptr(),
            1,
            &mut list,
        );
        rd::rd_kafka_mock_cgrp_consumer_target_assignment(mock, group.as_ptr(), target);
        rd::rd_kafka_mock_cgrp_consumer_target_assignment_destroy(target);
        rd::rd_kafka_topic_partition_list_destroy(list);
    }
}

/// Polls `host`'s metrics until `done` holds of the page (60 s at most).
fn wait_for_page(host: &RunningHost, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = host.metrics.render();
        if done(&page) {
            return page;
        }
        assert!(Instant::now() < deadline, "{what}:\n{page}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_lone_half_waits_paused_and_its_task_starts_from_its_commit_when_the_pair_comes() {
    let (owner, bootstrap) = new_protocol_cluster();
    let group = format!("halves-{}", std::process::id());
    let p = producer(&bootstrap);
    produce_orders(&p, 0, 100);
    let mut settings = config(&bootstrap, &group, r#"group_protocol = "consumer""#);
    // Task 3 restarts behind a backlog on both its partitions, and the mock fetches them apart:
    // 100 ms of idling could let orders pass their payments (as Kafka Streams' max.task.idle.ms).
    settings.join.max_idle = Duration::from_secs(2);
    let host = start_host_config(settings);
    let page = wait_for_page(&host, "all four tasks", |page| {
        sample(page, "cojoin_assigned_tasks") == Some(4) && page.contains("cojoin_group_member{")
    });
    let member = page
        .split("cojoin_group_member{member_id=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    read_outputs(&bootstrap, |o| paid(o) >= 75);

    // Orders 100..140 without their payments yet: task 3 holds some of them in its state.
    for i in 100..140 {
        let key = format!("order-{i}");
        send(
            &p,
            "orders",
            &key,
            &format!("{{\"n\":{i}}}"),
            BASE_TS + i * 1000,
            None,
        );
    }
    p.flush(Duration::from_secs(10)).unwrap();
    wait_for_page(&host, "orders 100..140 consumed", |page| {
        sample(page, "cojoin_records_consumed_total{topic=\"orders\"}") == Some(140)
    });

    // payments-3 goes, orders-3 stays: task 3 stops (its state dropped, its commit point still
    // before the orders it held) and orders-3 is paused.
    let mut without_payments_3: Vec<(&str, i32)> = (0..PARTITIONS).map(|p| ("orders", p)).collect();
    without_payments_3.extend((0..3).map(|p| ("payments", p)));
    assign_exactly(&owner, &group, &member, &without_payments_3);
    wait_for_page(&host, "task 3 waiting for its pair", |page| {
        sample(page, "cojoin_tasks_waiting_for_pair") == Some(1)
            && sample(page, "cojoin_assigned_tasks") == Some(3)
    });
    // The payments come while task 3 is down, then the rest of the stream.
    for i in (100..140).filter(|i| i % 4 != 0) {
        let key = format!("order-{i}");
        send(
            &p,
            "payments",
            &key,
            &format!("{{\"for\":{i}}}"),
            BASE_TS + i * 1000 + 2000,
            None,
        );
    }
    produce_orders(&p, 140, 200);
    std::thread::sleep(Duration::from_millis(500));

    // payments-3 comes back: task 3 starts from its commit — orders-3 is sought back there, or
    // the orders it held would never meet their payments.
    let all: Vec<(&str, i32)> = ["orders", "payments"]
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| (*t, p)))
        .collect();
    assign_exactly(&owner, &group, &member, &all);
    let page = wait_for_page(&host, "task 3 started again", |page| {
        sample(page, "cojoin_assigned_tasks") == Some(4)
            && sample(page, "cojoin_tasks_waiting_for_pair") == Some(0)
    });
    assert_eq!(sample(&page, "cojoin_pair_waits_total"), Some(1), "{page}");
    assert_eq!(
        sample(&page, "cojoin_tasks_revoked_total"),
        Some(1),
        "{page}"
    );
    assert_eq!(
        sample(&page, "cojoin_tasks_assigned_total"),
        Some(5),
        "{page}"
    );
    assert!(
        page.lines()
            .find_map(|l| l
                .strip_prefix("cojoin_pair_wait_seconds_total ")?
                .parse::<f64>()
                .ok())
            .is_some_and(|s| s >= 0.5),
        "{page}"
    );
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    host.stop();
    assert_every_order_reported(&outputs);
}

/// Exactly-once on the mock cluster, as far as the mock goes: it speaks the transactional
/// protocol but keeps no transactional offsets and writes no abort markers, so what a
/// `read_committed` reader sees across a restart or an abort is checked on Apache Kafka
/// (tests/tests/kafka_eos.rs). Here: transactions commit, and a zombie's offset commit refused
/// with ILLEGAL_GENERATION (KIP-447 fencing) aborts the transaction, the tasks replay from their
/// last commit, and no order is lost.
#[test]
fn exactly_once_commits_transactions_and_an_aborted_one_is_replayed_without_loss() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let (cluster, bootstrap) = join_cluster();
    let (p, host) = host_on_first_half(
        &bootstrap,
        eos_config(&bootstrap, &format!("eos-{}", std::process::id())),
    );
    let committed = wait_for_page(&host, "a transaction committed", |page| {
        sample(page, "cojoin_transactions_committed_total").is_some_and(|n| n > 0)
    });
    assert_eq!(
        sample(&committed, "cojoin_transactions_aborted_total"),
        Some(0),
        "{committed}"
    );
    // A committed transaction is the commit of exactly-once: counted as one in both modes.
    assert!(
        sample(&committed, "cojoin_commits_total")
            >= sample(&committed, "cojoin_transactions_committed_total"),
        "{committed}"
    );

    cluster.request_errors(
        RDKafkaApiKey::TxnOffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION],
    );
    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    let page = wait_for_page(&host, "the transaction aborted", |page| {
        sample(page, "cojoin_transactions_aborted_total") == Some(1)
    });
    host.stop();
    assert_every_order_reported(&outputs);
    eprintln!(
        "{}",
        page.lines()
            .filter(|l| l.starts_with("cojoin_transaction"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn eos_config(bootstrap: &str, group: &str) -> Config {
    let mut c = config(bootstrap, group, CLASSIC);
    c.output.guarantee = cojoin::config::Guarantee::ExactlyOnce;
    c
}

/// Exactly-once through transaction errors the client retries (CONCURRENT_TRANSACTIONS on
/// AddPartitionsToTxn and EndTxn) and a broker outage during commits: the host keeps running and
/// no order is lost. (Duplicates cannot be judged here: the mock keeps aborted records visible.)
#[test]
fn exactly_once_rides_out_retriable_transaction_errors_and_a_broker_outage_without_loss() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let (cluster, bootstrap) = join_cluster();
    let (p, host) = host_on_first_half(
        &bootstrap,
        eos_config(&bootstrap, &format!("eos-faults-{}", std::process::id())),
    );

    let busy = RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS;
    cluster.request_errors(RDKafkaApiKey::AddPartitionsToTxn, &[busy; 3]);
    cluster.request_errors(RDKafkaApiKey::EndTxn, &[busy; 3]);
    produce_orders(&p, 100, 150);
    cluster.broker_down(1).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    cluster.broker_up(1).unwrap();
    produce_orders(&p, 150, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    let page = host.metrics.render();
    host.stop();
    assert_every_order_reported(&outputs);
    eprintln!(
        "{}",
        page.lines()
            .filter(|l| l.starts_with("cojoin_transaction"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A transaction error the producer cannot survive (INVALID_TXN_STATE on EndTxn is fatal in
/// librdkafka, as a broker's fencing is) renews the producer: the host goes on, its tasks replay
/// from the last commit, and no order is lost.
#[test]
fn exactly_once_renews_a_producer_failed_for_good_and_loses_nothing() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let (cluster, bootstrap) = join_cluster();
    let group = format!("eos-renew-{}", std::process::id());
    let (p, host) = host_on_first_half(&bootstrap, eos_config(&bootstrap, &group));
    cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE],
    );
    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    assert!(
        !host.thread.is_finished(),
        "the host stopped after one fatal transaction error"
    );
    host.stop();
    assert_every_order_reported(&outputs);
}

/// A producer failed for good again and again, with no commit between (another process with the
/// transactional id, say), stops the host with the reason, committing nothing; a new host resumes
/// from the last commit and no order is lost.
#[test]
fn exactly_once_stops_with_the_reason_when_renewed_producers_keep_failing_and_a_restart_loses_nothing(
) {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let (cluster, bootstrap) = join_cluster();
    let group = format!("eos-fatal-{}", std::process::id());
    let (p, host) = host_on_first_half(&bootstrap, eos_config(&bootstrap, &group));
    cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE; 12],
    );
    produce_orders(&p, 100, 150);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !host.thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the host kept running while every transaction failed for good"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let error = host
        .thread
        .join()
        .unwrap()
        .expect_err("the host stops with an error");
    let message = format!("{error:#}");
    eprintln!("{message}");
    assert!(
        message.contains("failed for good") && message.contains("renewed 3 times"),
        "{message}"
    );
    cluster.clear_request_errors(RDKafkaApiKey::EndTxn);

    let host = start_host_config(eos_config(&bootstrap, &group));
    produce_orders(&p, 150, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    host.stop();
    assert_every_order_reported(&outputs);
}

#[test]
fn a_side_whose_fetches_are_slowed_is_waited_for_and_nothing_becomes_late() {
    use rdkafka::mocking::MockCoordinator;

    // Two brokers: the orders partitions on broker 2, the payments and the group on broker 1.
    let (cluster, bootstrap) = join_cluster_of(2);
    for p in 0..PARTITIONS {
        cluster.partition_leader("orders", p, Some(2)).unwrap();
        cluster.partition_leader("payments", p, Some(1)).unwrap();
    }
    let group = format!("slowed-{}", std::process::id());
    cluster
        .coordinator(MockCoordinator::Group(group.clone()), 1)
        .unwrap();
    let p = producer(&bootstrap);
    produce_orders(&p, 0, 100);
    let host = start_host(&bootstrap, &group);
    read_outputs(&bootstrap, |o| paid(o) >= 70);

    // From now on every request to broker 2 takes 400 ms (4 × max_idle): the orders reach the
    // broker and the host that much after their payments, which are stamped 2 s after them and
    // more than max_idle ahead of what the host last read of the orders. Going on without the
    // orders would make them late; the host must wait for them.
    cluster
        .broker_round_trip_time(2, Duration::from_millis(400))
        .unwrap();
    produce_orders(&p, 100, 200);
    produce_ticks(&p);
    let outputs = read_outputs(&bootstrap, every_order_in);
    let page = host.metrics.render();
    host.stop();

    assert_every_order_reported(&outputs);
    assert_eq!(
        sample(&page, "cojoin_late_records_total"),
        Some(0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "cojoin_dead_lettered_records_total"),
        Some(0),
        "{page}"
    );
    eprintln!(
        "end offsets asked {:?}, behind {:?}",
        sample(&page, "cojoin_end_offsets_asked_total"),
        sample(&page, "cojoin_end_offsets_behind_total")
    );
}
