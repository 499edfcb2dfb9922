//! The latency benchmark (`make bench-latency`, not CI): end-to-end latency of the orders-paid
//! join on Apache Kafka 4.4 (tests/kafka/broker.sh), cojoin beside the systems a user would pick
//! instead, each on a fresh broker of its own, in turn.
//!
//! Each run: 100 orders/s (COJOIN_LATENCY_RATE) in real event time (three in four paid two
//! orders' spacing later, 20 ms at 100/s, in the same send), 6 partitions, one instance of the
//! system (cojoin: COJOIN_LATENCY_HOSTS hosts in one group, default 1; the peers always one)
//! reading `orders` and `payments` and writing the paid orders to `orders-paid`; a
//! `read_committed` reader times each paid order from sending its payment to reading its output.
//! A warm-up first: the stream flows from the start, and timing begins 5 s per instance after the
//! system's first output (JIT, group join, state set-up, the group's rebalances as the hosts
//! join), then lasts COJOIN_LATENCY_SECS. The same reader times the payments themselves: the
//! floor (the test producer, the broker, a fetch) that every figure includes.
//!
//! Systems (COJOIN_LATENCY_SYSTEMS, comma-separated, default all), each at-least-once and
//! exactly-once (`-eos`):
//! - `cojoin-rust`, `cojoin-python`: one `cojoin run`, the left join with the order-paid plugin,
//!   `join.max_idle` its default (or COJOIN_LATENCY_MAX_IDLE), `output.commit_interval` its
//!   default (or COJOIN_LATENCY_COMMIT_INTERVAL), [kafka.options] lines from
//!   COJOIN_LATENCY_KAFKA_OPTIONS;
//! - `kafka-streams`: Kafka Streams 4.4 (host/benches/peers/kafka-streams), its defaults
//!   (RocksDB window stores; exactly-once is `exactly_once_v2`, committing every 100 ms);
//! - `flink`: Flink 2.2's DataStream interval join on a local mini-cluster
//!   (host/benches/peers/flink), no checkpoints at-least-once, checkpoints every 100 ms and a
//!   transactional sink exactly-once.
//!
//! Rounds rather than each system's runs back to back (COJOIN_LATENCY_RUNS, default 3, of
//! COJOIN_LATENCY_SECS, default 60), then a table of the medians: p50, p99, each run's p99, the
//! paid orders timed, the floor, and for cojoin the seconds its tasks waited for a side and
//! (exactly-once) the mean time a transaction's commit took. The test producer does not linger;
//! with COJOIN_LATENCY_TRANSACTIONAL=1 it writes each 10 ms tick's records in a transaction of
//! its own, as an exactly-once upstream would (the topics then hold a commit marker after each).

#[allow(dead_code)]
#[path = "../tests/kafka_scale/paced.rs"]
mod paced;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::hosts::{join_config_for, HostProcess};
use cojoin_e2e::outputs::Outputs;
use cojoin_e2e::scenario::{join_broker, order_outputs, run_dir, PARTITIONS};
use cojoin_e2e::stream::Record;
use cojoin_e2e::{java_peer, plugin};
use paced::order_at;
use rdkafka::producer::Producer as _;

/// What the systems join: cojoin's test config (tests/hosts.rs) has a 10 s window, no grace.
const WINDOW_MS: &str = "10000";
/// From the system's first output to the start of timing, per instance.
const WARM_UP: Duration = Duration::from_secs(5);
/// How long a system may take to its first output.
const FIRST_OUTPUT_WITHIN: Duration = Duration::from_secs(180);

#[derive(Clone, Copy)]
enum Kind {
    Cojoin(&'static str),
    KafkaStreams,
    Flink,
}

/// The stream and how many cojoin hosts share it.
#[derive(Clone, Copy)]
struct Load {
    /// Orders per second of wall time, in real event time.
    rate: u32,
    hosts: u32,
    /// Each tick's records in a transaction of their own.
    transactional: bool,
}

/// A system under test: its kind and guarantee.
#[derive(Clone, Copy)]
struct System {
    kind: Kind,
    exactly_once: bool,
}

impl System {
    fn name(&self) -> String {
        let base = match self.kind {
            Kind::Cojoin("order_paid_rust.wasm") => "cojoin-rust",
            Kind::Cojoin(_) => "cojoin-python",
            Kind::KafkaStreams => "kafka-streams",
            Kind::Flink => "flink",
        };
        format!("{base}{}", if self.exactly_once { "-eos" } else { "" })
    }

    fn guarantee(&self) -> &'static str {
        if self.exactly_once {
            "exactly-once"
        } else {
            "at-least-once"
        }
    }

    /// Starts the system on `kafka` (cojoin: `hosts` hosts), its logs in `dir`.
    fn start(&self, dir: &std::path::Path, kafka: &Kafka, name: &str, hosts: u32) -> Running {
        let peer = |mut cmd: Command| {
            let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
            let child = cmd
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("starting java");
            Running::Peer(child)
        };
        let data = [
            "--bootstrap",
            &kafka.bootstrap,
            "--left",
            "orders",
            "--right",
            "payments",
            "--output-topic",
            "orders-paid",
            "--window-ms",
            WINDOW_MS,
            "--grace-ms",
            "0",
            "--guarantee",
            self.guarantee(),
        ];
        match self.kind {
            Kind::Cojoin(wasm) => {
                let config = cojoin_config(&kafka.bootstrap, name, wasm, self.guarantee());
                Running::Hosts(
                    (0..hosts)
                        .map(|h| HostProcess::start(dir, &format!("host-{h}"), &config))
                        .collect(),
                )
            }
            Kind::KafkaStreams => {
                let mut cmd = java_peer("kafka-streams", "KafkaStreamsJoin");
                cmd.args(data).args(["--forever", "true", "--app-id", name]);
                peer(cmd)
            }
            Kind::Flink => {
                let mut cmd = java_peer("flink", "FlinkJoin");
                cmd.args(data).args(["--group", name]);
                peer(cmd)
            }
        }
    }
}

/// A running system; dropping it kills it.
enum Running {
    Hosts(Vec<HostProcess>),
    Peer(Child),
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Running::Peer(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The left join of tests/hosts.rs with plugin `wasm` under `guarantee`, `join.max_idle` its
/// default unless COJOIN_LATENCY_MAX_IDLE names one.
fn cojoin_config(bootstrap: &str, group: &str, wasm: &str, guarantee: &str) -> String {
    let config = join_config_for("consumer", bootstrap, group, &plugin(wasm), "left");
    let config = config.replace(
        "[output]\n",
        &format!("[output]\nguarantee = \"{guarantee}\"\n"),
    );
    let config = match std::env::var("COJOIN_LATENCY_COMMIT_INTERVAL") {
        Ok(interval) => config.replace(
            "[output]\n",
            &format!("[output]\ncommit_interval = \"{interval}\"\n"),
        ),
        Err(_) => config,
    };
    let config = match std::env::var("COJOIN_LATENCY_MAX_IDLE") {
        Ok(idle) => config.replace("max_idle = \"1s\"", &format!("max_idle = \"{idle}\"")),
        Err(_) => config.replace("max_idle = \"1s\"\n", ""),
    };
    // Options to try, as lines of [kafka.options] (`"linger.ms" = "0"`).
    match std::env::var("COJOIN_LATENCY_KAFKA_OPTIONS") {
        Ok(lines) => config.replace("[kafka.options]\n", &format!("[kafka.options]\n{lines}\n")),
        Err(_) => config,
    }
}

/// One run's figures.
struct Run {
    p50: Duration,
    p99: Duration,
    /// Paid orders timed, of those paid while timing.
    timed: usize,
    paid: usize,
    floor: (Duration, Duration),
    /// cojoin's /metrics: seconds its tasks waited for a side, in all, and under exactly-once the
    /// mean milliseconds a transaction's commit took.
    waited: Option<f64>,
    commit_ms: Option<f64>,
}

fn run(system: System, round: u64, secs: u64, load: Load) -> Run {
    let name = format!("latency-{}-{round}", system.name());
    let dir = run_dir(&name);
    let kafka = join_broker(&dir);
    let instances = match system.kind {
        Kind::Cojoin(_) => load.hosts,
        _ => 1,
    };
    let running = system.start(&dir, &kafka, &name, instances);
    let outputs = Outputs::start(&kafka);
    let payments = Outputs::start_on(&kafka, "payments");
    // No linger: the floor is the broker and a fetch, not the test producer's batching.
    let mut settings = vec![("linger.ms".to_owned(), "0".to_owned())];
    if load.transactional {
        settings.push(("transactional.id".into(), format!("{name}-upstream")));
    }
    let producer = Kafka::producer_with(&kafka.bootstrap, "murmur2_random", &settings);
    if load.transactional {
        producer
            .init_transactions(Duration::from_secs(30))
            .expect("the upstream producer's init_transactions");
    }
    let mut paid_at: BTreeMap<String, Instant> = BTreeMap::new();
    let started = Instant::now();
    let mut timing: Option<Instant> = None;
    let mut next = 0;
    while timing.is_none_or(|t| t.elapsed() < Duration::from_secs(secs)) {
        if timing.is_none() && next % 50 == 0 {
            match outputs.first_arrived() {
                Some(first) if first.elapsed() >= WARM_UP * instances => {
                    timing = Some(Instant::now())
                }
                None if started.elapsed() > FIRST_OUTPUT_WITHIN => {
                    panic!("{name}: no output in {FIRST_OUTPUT_WITHIN:?}; logs in {dir:?}")
                }
                _ => {}
            }
        }
        let due = (started.elapsed().as_secs_f64() * f64::from(load.rate)) as u32;
        if load.transactional {
            producer
                .begin_transaction()
                .expect("beginning a transaction");
        }
        for p in 0..PARTITIONS {
            let orders: Vec<u32> = (next..due)
                .filter(|i| (i % PARTITIONS as u32) as i32 == p)
                .collect();
            let sent = Instant::now();
            let records: Vec<Record> = orders
                .iter()
                .flat_map(|&i| order_at(i, load.rate))
                .collect();
            Kafka::produce_with(&producer, &records, Some(p));
            if timing.is_some() {
                for i in orders.into_iter().filter(|i| i % 4 != 0) {
                    paid_at.insert(format!("order-{i}"), sent);
                }
            }
        }
        if load.transactional {
            producer
                .commit_transaction(Duration::from_secs(10))
                .expect("committing a transaction");
        }
        next = next.max(due);
        std::thread::sleep(Duration::from_millis(10));
    }
    let paid_outputs = |read: &[cojoin_e2e::broker::ReadRecord]| {
        read.iter()
            .filter_map(|r| {
                let (order, status) = order_outputs(std::slice::from_ref(r)).pop()?;
                let at = paid_at.get(&order).filter(|_| status == "paid")?;
                Some((order, r.arrived.saturating_duration_since(*at)))
            })
            .collect::<BTreeMap<String, Duration>>()
    };
    let read = outputs.wait(Duration::from_secs(60), Duration::from_secs(2), |r| {
        paid_outputs(r).len() >= paid_at.len()
    });
    // An order's first output (a repeat after a restart would be later, and is not expected).
    let latencies: Vec<Duration> = paid_outputs(&read).into_values().collect();
    let floor: Vec<Duration> = payments
        .snapshot()
        .iter()
        .filter_map(|r| Some(r.arrived.saturating_duration_since(*paid_at.get(&r.key)?)))
        .collect();
    let (waited, commit_ms) = match &running {
        Running::Hosts(hosts) => host_figures(hosts),
        Running::Peer(_) => (None, None),
    };
    drop(running);
    let (p50, p99) = quantiles(latencies.clone());
    let r = Run {
        p50,
        p99,
        timed: latencies.len(),
        paid: paid_at.len(),
        floor: quantiles(floor),
        waited,
        commit_ms,
    };
    eprintln!(
        "{name}: {} of {} paid orders timed over {secs} s: p50 {:.1} ms, p99 {:.1} ms (floor {:.1} / {:.1} ms)",
        r.timed,
        r.paid,
        ms(r.p50),
        ms(r.p99),
        ms(r.floor.0),
        ms(r.floor.1)
    );
    r
}

/// From the hosts' /metrics: the seconds their tasks waited for a side, and the mean
/// milliseconds of a transaction's commit (none committed: `None`).
fn host_figures(hosts: &[HostProcess]) -> (Option<f64>, Option<f64>) {
    let (mut waited, mut commit_s, mut commits) = (0.0, 0.0, 0.0);
    for host in hosts {
        let page = cojoin_e2e::http::get(&format!(
            "{}/metrics",
            host.admin_url(Duration::from_secs(5))
        ))
        .body;
        waited += page
            .lines()
            .filter(|l| l.starts_with("cojoin_task_waited_seconds{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        let sample = |name| cojoin_e2e::http::sample(&page, name).unwrap_or(0.0);
        commit_s += sample("cojoin_transaction_commit_seconds_total");
        commits += sample("cojoin_transactions_committed_total");
    }
    let commit_ms = (commits > 0.0).then(|| commit_s * 1000.0 / commits);
    (Some(waited), commit_ms)
}

/// (p50, p99) of `ds`; zero if empty.
fn quantiles(mut ds: Vec<Duration>) -> (Duration, Duration) {
    if ds.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    ds.sort();
    let at = |q: f64| ds[((ds.len() as f64 * q) as usize).min(ds.len() - 1)];
    (at(0.5), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (runs, secs) = (
        env_or("COJOIN_LATENCY_RUNS", 3).max(1),
        env_or("COJOIN_LATENCY_SECS", 60),
    );
    let load = Load {
        rate: env_or("COJOIN_LATENCY_RATE", 100).clamp(1, 1_000_000) as u32,
        hosts: env_or("COJOIN_LATENCY_HOSTS", 1).clamp(1, 16) as u32,
        transactional: env_or("COJOIN_LATENCY_TRANSACTIONAL", 0) == 1,
    };
    let mut systems = Vec::new();
    for kind in [
        Kind::Cojoin("order_paid_rust.wasm"),
        Kind::Cojoin("order_paid_python.wasm"),
        Kind::KafkaStreams,
        Kind::Flink,
    ] {
        for exactly_once in [false, true] {
            systems.push(System { kind, exactly_once });
        }
    }
    let wanted: Option<BTreeSet<String>> = std::env::var("COJOIN_LATENCY_SYSTEMS")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    systems.retain(|s| wanted.as_ref().is_none_or(|w| w.contains(&s.name())));
    assert!(
        !systems.is_empty(),
        "COJOIN_LATENCY_SYSTEMS names none of the systems (cojoin-rust, cojoin-python, kafka-streams, flink, each also -eos)"
    );
    let mut results: Vec<(System, Vec<Run>)> = systems.iter().map(|s| (*s, vec![])).collect();
    for round in 1..=runs {
        for (system, rs) in &mut results {
            rs.push(run(*system, round, secs, load));
        }
    }
    let setting = |name| std::env::var(name).unwrap_or_else(|_| "default".into());
    let idle = setting("COJOIN_LATENCY_MAX_IDLE");
    let interval = setting("COJOIN_LATENCY_COMMIT_INTERVAL");
    println!(
        "\nlatency: {} orders/s (three in four paid{}), 6 partitions, {} cojoin host(s) and one instance of a peer, payment sent -> output read (read_committed); medians of {runs} runs of {secs} s; cojoin's join.max_idle {idle}, output.commit_interval {interval}\n",
        load.rate,
        if load.transactional {
            ", a transaction every 10 ms"
        } else {
            ""
        },
        load.hosts
    );
    println!("| system | guarantee | p50 ms | p99 ms | runs' p99 ms | timed / paid | floor p50 / p99 ms | tasks waited s | commit ms |");
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|");
    for (system, rs) in &results {
        let m = |f: &dyn Fn(&Run) -> f64| median(rs.iter().map(f).collect());
        let runs99: Vec<String> = rs.iter().map(|r| format!("{:.1}", ms(r.p99))).collect();
        let some = |f: fn(&Run) -> Option<f64>| {
            if rs.iter().all(|r| f(r).is_some()) {
                format!("{:.1}", m(&|r| f(r).unwrap_or(0.0)))
            } else {
                "-".into()
            }
        };
        let (waited, commit) = (some(|r| r.waited), some(|r| r.commit_ms));
        println!(
            "| {} | {} | {:.1} | {:.1} | {} | {:.0} / {:.0} | {:.1} / {:.1} | {waited} | {commit} |",
            system.name(),
            system.guarantee(),
            m(&|r| ms(r.p50)),
            m(&|r| ms(r.p99)),
            runs99.join(" "),
            m(&|r| r.timed as f64),
            m(&|r| r.paid as f64),
            m(&|r| ms(r.floor.0)),
            m(&|r| ms(r.floor.1)),
        );
    }
    let machine = std::process::Command::new("nproc")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!("\nmachine: {machine} cores");
    let incomplete: Vec<String> = results
        .iter()
        .filter(|(_, rs)| rs.iter().any(|r| r.timed < r.paid))
        .map(|(s, _)| s.name())
        .collect();
    if !incomplete.is_empty() {
        println!("not every paid order was read within 60 s of the end for: {incomplete:?}");
    }
}
