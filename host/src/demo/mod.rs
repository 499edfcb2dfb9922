//! `cojoin demo`: the real join on an embedded broker, no install. librdkafka's in-process mock
//! cluster stands in for Kafka; a generated shop ([`stream`]) produces orders and payments in real
//! time; a `cojoin run` host (the same code, in a thread) joins them with the given plugin; this
//! module reads the output topic, prints every result as it arrives and ends with a summary.
//!
//! It connects the Kafka side and the plugin side only through `run::Host`, as `run` does.

pub mod stream;

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::admin::AdminServer;
use crate::config::{AdminConfig, Config};
use crate::plugin::PluginRegistry;
use crate::run::Host;
use stream::{Fate, EVENT_MS_PER_REAL_MS, GRACE_MS, WINDOW_MS};

const PARTITIONS: i32 = 3;
const OUTPUT: &str = "orders-paid";
const DLQ: &str = "orders-payments-dlq";
/// The demo ends once every record is produced and no output came for this long.
const QUIET: Duration = Duration::from_secs(3);

pub struct DemoOptions {
    /// Records to generate (orders and payments).
    pub events: usize,
    pub seed: u64,
    /// Print every result as it arrives.
    pub print: bool,
    /// Where the admin server listens.
    pub admin_bind: String,
}

/// What the demo saw, for its closing lines and for tests.
#[derive(Debug, Default)]
pub struct DemoSummary {
    pub events: usize,
    pub orders: usize,
    pub paid: usize,
    pub unpaid: usize,
    pub dead_letters: usize,
    /// Orders whose window had not closed when the stream ended (no outcome yet).
    pub open: usize,
    /// Wall-clock ms from producing a match's later record to reading its output, sorted.
    pub match_latency_ms: Vec<f64>,
    /// What the generator intended, per fate.
    pub fates: HashMap<&'static str, usize>,
}

impl DemoSummary {
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let n = self.match_latency_ms.len();
        (n > 0).then(|| self.match_latency_ms[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
    }
}

/// The host's config for the embedded broker: the example's left join, in the demo's event time.
fn demo_config(bootstrap: &str) -> Result<Config> {
    let text = format!(
        r#"
[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "cojoin-demo"
[kafka.options]
# The mock broker answers a fetch only when its wait is over, not when data arrives (as Kafka does).
"fetch.wait.max.ms" = "10"
"linger.ms" = "1"
[join]
left = "orders"
right = "payments"
kind = "left"
window = "{WINDOW_MS}ms"
grace = "{GRACE_MS}ms"
max_idle = "100ms"
late = "dead-letter"
[plugin]
path = "(given on the command line)"
[output]
topic = "{OUTPUT}"
dead_letter_topic = "{DLQ}"
"#
    );
    Ok(Config::parse(&text)?)
}

/// Runs the demo until the stream is done and its results are in, or `stop` is set.
pub fn run(
    options: &DemoOptions,
    registry: Arc<PluginRegistry>,
    stop: &AtomicBool,
) -> Result<DemoSummary> {
    let cluster = MockCluster::new(1).context("starting the embedded broker")?;
    for topic in ["orders", "payments"] {
        cluster.create_topic(topic, PARTITIONS, 1)?;
    }
    cluster.create_topic(OUTPUT, 1, 1)?;
    cluster.create_topic(DLQ, 1, 1)?;
    let bootstrap = cluster.bootstrap_servers();
    println!("embedded broker at {bootstrap}: topics orders and payments ({PARTITIONS} partitions each), {OUTPUT}, {DLQ}");

    let host = Arc::new(Host::new(demo_config(&bootstrap)?, registry.clone()));
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

/// Waits for the host's tasks, produces the stream in (compressed) real time on a thread, and
/// reads the results as they come.
fn drive(
    options: &DemoOptions,
    bootstrap: &str,
    host: &Host,
    stop: &AtomicBool,
) -> Result<DemoSummary> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.metrics.processing() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the host got no partitions within 60 s"
        );
        if stop.load(Ordering::Relaxed) {
            return Ok(DemoSummary::default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (planned, fates) = stream::generate(options.events, options.seed);
    let mut summary = DemoSummary {
        events: planned.len(),
        orders: fates.len(),
        ..DemoSummary::default()
    };
    for f in &fates {
        let name = match f {
            Fate::Paid => "paid in the window",
            Fate::PaidTooLate => "paid after the window",
            Fate::Delayed => "payment delayed (late record)",
            Fate::Never => "never paid",
        };
        *summary.fates.entry(name).or_default() += 1;
    }
    println!(
        "producing {} orders and their payments ({} records), 1 s of event time every {} ms; window {} s, grace {} s",
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
        let producer = stream_producer(bootstrap)?;
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

    let outputs = reader(bootstrap)?;
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
        let Some(Ok(body)) = message
            .payload()
            .map(serde_json::from_slice::<serde_json::Value>)
        else {
            writeln!(
                stdout,
                "  (an output that is not JSON: {:?})",
                message.payload()
            )?;
            continue;
        };
        let order_id = body["order_id"].as_str().unwrap_or("?");
        let amount = body["order"]["amount"].as_f64().unwrap_or(0.0);
        match body["status"].as_str() {
            Some("paid") => {
                let latency = produced_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(order_id)
                    .map(|t| t.elapsed().as_secs_f64() * 1000.0);
                summary.paid += 1;
                if let Some(ms) = latency {
                    summary.match_latency_ms.push(ms);
                }
                if options.print {
                    let latency = latency.map_or(String::new(), |ms| {
                        format!("{ms:>6.1} ms after the payment")
                    });
                    writeln!(stdout, "  paid    {order_id}  {amount:>8.2}  {latency}")?;
                }
            }
            Some("unpaid") => {
                summary.unpaid += 1;
                if options.print {
                    writeln!(
                        stdout,
                        "  UNPAID  {order_id}  {amount:>8.2}  no payment within {} s",
                        WINDOW_MS / 1000
                    )?;
                }
            }
            other => {
                if options.print {
                    writeln!(stdout, "  {}  {order_id}", other.unwrap_or("?"))?;
                }
            }
        }
    }
    producer_thread
        .0
        .join()
        .map_err(|_| anyhow::anyhow!("the demo's producer panicked"))??;
    summary.open = summary.orders.saturating_sub(summary.paid + summary.unpaid);
    summary.match_latency_ms.sort_by(f64::total_cmp);
    Ok(summary)
}

/// A producer for the generated stream: the Java-compatible partitioner, so that each key sits in
/// the same partition number of both topics.
fn stream_producer(bootstrap: &str) -> Result<BaseProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "1")
        .create()
        .context("creating the stream's producer")
}

/// Produces `planned` as it would arrive, event time running `speed` times faster than the wall
/// clock and ending now, until done or `stop`; `sent(key)` after each record. Returns how many
/// records were produced (all acknowledged).
pub fn produce_stream(
    producer: &BaseProducer,
    planned: Vec<stream::Planned>,
    speed: i64,
    stop: &AtomicBool,
    mut sent: impl FnMut(&str),
) -> Result<usize> {
    // Event time runs faster than the clock: started at now, it would run hours ahead of it in a
    // long stream, past any host's join.max_future. Starting it one stream's span in the past
    // keeps every timestamp at or before the wall clock.
    let span = planned.iter().map(|p| p.timestamp).max().unwrap_or(0);
    let base_ts = crate::clock::now_ms() as i64 - span;
    let start = Instant::now();
    let mut count = 0;
    for p in planned {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let due = start + Duration::from_millis((p.arrival / speed.max(1)) as u64);
        while let Some(wait) = due.checked_duration_since(Instant::now()) {
            producer.poll(wait);
        }
        let topic = if p.is_order { "orders" } else { "payments" };
        let record = BaseRecord::to(topic)
            .key(&p.key)
            .payload(&p.value)
            .timestamp(base_ts + p.timestamp);
        crate::kafka::sink::send_with_room(producer, record)
            .with_context(|| format!("producing to {topic}"))?;
        sent(&p.key);
        count += 1;
    }
    producer
        .flush(Duration::from_secs(30))
        .context("records not acknowledged within 30 s")?;
    Ok(count)
}

/// `cojoin generate`: the demo's stream, produced to the `orders` and `payments` topics of a real
/// broker. Returns the number of records produced.
pub fn generate(
    bootstrap: &str,
    events: usize,
    seed: u64,
    speed: i64,
    stop: &AtomicBool,
) -> Result<usize> {
    let producer = stream_producer(bootstrap)?;
    let (planned, _) = stream::generate(events, seed);
    produce_stream(&producer, planned, speed, stop, |_| {})
}

/// A consumer of the output topic from its start (no group: it only watches).
fn reader(bootstrap: &str) -> Result<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "cojoin-demo-watch")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("creating the output reader")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(OUTPUT, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    Ok(consumer)
}
