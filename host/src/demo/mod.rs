//! `cojoin demo`: the real join on an embedded broker, no install. librdkafka's in-process mock
//! cluster stands in for Kafka; a generated shop produces orders and payments (and, with
//! `--topics 3`, shipments) in real time; a `cojoin run` host (the same code, in a thread) joins
//! them with the given plugin; this module reads the output topic, prints every result as it
//! arrives and ends with a summary set against what the generator intended.
//!
//! Layout:
//! - [`shop`]: the two joins (two topics or three): topics, host config, example plugin.
//! - [`stream`], [`shipments`]: the two-topic and three-topic shops' streams, each order with
//!   its fate. Pure and seeded.
//! - [`produce`]: the stream to Kafka in compressed real time (also `cojoin generate`).
//! - [`summary`]: each result's line, the counts and the closing summary. Pure.
//! - this module: the embedded broker, the host thread, and the loop reading the results.
//!
//! It connects the Kafka side and the plugin side only through `run::Host`, as `run` does.

pub mod produce;
pub mod shipments;
pub mod shop;
pub mod stream;
pub mod summary;

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::admin::AdminServer;
use crate::config::AdminConfig;
use crate::plugin::PluginRegistry;
use crate::run::Host;
pub use produce::{generate, produce_stream};
pub use shop::Shop;
use stream::{order_key, EVENT_MS_PER_REAL_MS, GRACE_MS, WINDOW_MS};
pub use summary::DemoSummary;
use summary::Reading;

const PARTITIONS: i32 = 3;
/// The demo ends once every record is produced and no output came for this long.
const QUIET: Duration = Duration::from_secs(3);

pub struct DemoOptions {
    /// Which join: two topics or three.
    pub shop: Shop,
    /// Records to generate (orders, payments and shipments).
    pub events: usize,
    pub seed: u64,
    /// Print every result as it arrives.
    pub print: bool,
    /// Where the admin server listens.
    pub admin_bind: String,
}

/// Runs the demo until the stream is done and its results are in, or `stop` is set.
pub fn run(
    options: &DemoOptions,
    registry: Arc<PluginRegistry>,
    stop: &AtomicBool,
) -> Result<DemoSummary> {
    let shop = options.shop;
    let cluster = MockCluster::new(1).context("starting the embedded broker")?;
    for topic in shop.topics() {
        cluster.create_topic(topic, PARTITIONS, 1)?;
    }
    cluster.create_topic(shop.output_topic(), 1, 1)?;
    cluster.create_topic(shop.dead_letter_topic(), 1, 1)?;
    let bootstrap = cluster.bootstrap_servers();
    println!(
        "embedded broker at {bootstrap}: topics {} ({PARTITIONS} partitions each), {}, {}",
        and_list(shop.topics()),
        shop.output_topic(),
        shop.dead_letter_topic()
    );

    let host = Arc::new(Host::new(shop.config(&bootstrap)?, registry.clone()));
    let admin = AdminServer::start(
        &AdminConfig {
            bind: options.admin_bind.clone(),
            ..AdminConfig::default()
        },
        host.admin_state(None, None),
    )?;
    println!(
        "plugin {}; admin: {}/metrics, /plugins, /healthz",
        registry.current().label,
        admin.url()
    );

    let host_stop = Arc::new(AtomicBool::new(false));
    let host_thread = {
        let (host, flag) = (host.clone(), host_stop.clone());
        std::thread::spawn(move || host.run(&flag))
    };
    let result = drive(options, &bootstrap, &host, stop);
    host_stop.store(true, Ordering::Relaxed);
    let host_result = host_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the host thread panicked"))?;
    let mut summary = result?;
    host_result.context("the join host stopped")?;
    summary.dead_letters = host.metrics.dead_lettered_records.get() as usize;
    Ok(summary)
}

/// "a and b", "a, b and c".
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Waits for the host's tasks, produces the stream in (compressed) real time on a thread, and
/// reads the results as they come.
fn drive(
    options: &DemoOptions,
    bootstrap: &str,
    host: &Host,
    stop: &AtomicBool,
) -> Result<DemoSummary> {
    let shop = options.shop;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.metrics.processing() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the host got no partitions within 60 s"
        );
        if stop.load(Ordering::Relaxed) {
            return Ok(DemoSummary {
                shop,
                ..DemoSummary::default()
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (planned, fates) = shop.generate(options.events, options.seed);
    let mut summary = DemoSummary {
        shop,
        events: planned.len(),
        records: (shop.topics().iter())
            .map(|t| (*t, planned.iter().filter(|p| p.topic == *t).count()))
            .collect(),
        orders: fates.len(),
        ..DemoSummary::default()
    };
    for f in &fates {
        *summary.fates.entry(f).or_default() += 1;
    }
    // Each order's fate until its result comes: those left are still open at the end.
    let mut awaited: HashMap<String, &'static str> = (fates.iter().enumerate())
        .map(|(i, f)| (order_key(i), *f))
        .collect();
    let others = and_list(&shop.topics()[1..]);
    println!(
        "producing {} orders and their {others} ({} records), 1 s of event time every {} ms; window {} s, grace {} s",
        fates.len(),
        planned.len(),
        stream::ORDER_EVERY_MS / EVENT_MS_PER_REAL_MS,
        WINDOW_MS / 1000,
        GRACE_MS / 1000
    );

    // When each key's latest record was produced: a match's output follows its later record.
    let produced_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let producer_thread = {
        let (produced_at, done) = (produced_at.clone(), done.clone());
        let producer = produce::stream_producer(bootstrap)?;
        let stop_early = Arc::new(AtomicBool::new(false));
        let stop_flag = stop_early.clone();
        let handle = std::thread::spawn(move || -> Result<()> {
            produce_stream(
                &producer,
                planned,
                EVENT_MS_PER_REAL_MS,
                &stop_flag,
                |key| {
                    produced_at
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key.to_owned(), Instant::now());
                },
            )?;
            done.store(true, Ordering::Relaxed);
            Ok(())
        });
        (handle, stop_early)
    };

    let outputs = reader(bootstrap, shop.output_topic())?;
    let mut last_output = Instant::now();
    let mut stdout = std::io::stdout().lock();
    loop {
        if stop.load(Ordering::Relaxed) {
            producer_thread.1.store(true, Ordering::Relaxed);
            break;
        }
        if done.load(Ordering::Relaxed) && last_output.elapsed() >= QUIET {
            break;
        }
        let Some(message) = outputs.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message.context("reading the output topic")?;
        last_output = Instant::now();
        let Some(reading) = message.payload().and_then(Reading::parse) else {
            writeln!(
                stdout,
                "  (an output that is not JSON: {:?})",
                message.payload()
            )?;
            continue;
        };
        let latency = reading
            .is_match()
            .then(|| {
                produced_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&reading.order_id)
                    .map(|t| t.elapsed().as_secs_f64() * 1000.0)
            })
            .flatten();
        awaited.remove(&reading.order_id);
        let line = summary.count(&reading, latency);
        if options.print {
            writeln!(stdout, "{line}")?;
        }
    }
    producer_thread
        .0
        .join()
        .map_err(|_| anyhow::anyhow!("the demo's producer panicked"))??;
    for fate in awaited.into_values() {
        *summary.open.entry(fate).or_default() += 1;
    }
    summary.match_latency_ms.sort_by(f64::total_cmp);
    Ok(summary)
}

/// A consumer of the output topic from its start (no group: it only watches).
fn reader(bootstrap: &str, topic: &str) -> Result<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "cojoin-demo-watch")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the output reader")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    Ok(consumer)
}
