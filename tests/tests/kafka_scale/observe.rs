//! What the scaling tests observe while hosts come and go: the outputs as they arrive (read on
//! a thread of their own), each task's longest gap in them, who owns each task, and the records
//! the hosts read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cojoin_e2e::broker::{Kafka, ReadRecord};
use cojoin_e2e::hosts::HostProcess;
use cojoin_e2e::http;
use cojoin_e2e::scenario::{order_outputs, PARTITIONS};

/// Reads the output topic on its own thread, so that arrival times are not bunched by the test's
/// waits.
pub(crate) struct Outputs {
    records: Arc<Mutex<Vec<ReadRecord>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Outputs {
    pub(crate) fn start(kafka: &Kafka) -> Outputs {
        Outputs::start_on(kafka, "orders-paid")
    }

    /// Reads `topic` (from its start) on a thread of its own.
    pub(crate) fn start_on(kafka: &Kafka, topic: &str) -> Outputs {
        let mut reader = kafka.reader(topic, 1);
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopped) = (records.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                reader.read_for(Duration::from_millis(50));
                shared.lock().unwrap().append(&mut reader.records);
            }
        });
        Outputs {
            records,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<ReadRecord> {
        self.records.lock().unwrap().clone()
    }

    /// Waits until `done` holds of what was read (or `timeout`), then `settle` more.
    pub(crate) fn wait(
        &self,
        timeout: Duration,
        settle: Duration,
        done: impl Fn(&[ReadRecord]) -> bool,
    ) -> Vec<ReadRecord> {
        let deadline = Instant::now() + timeout;
        while !done(&self.snapshot()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(settle);
        self.snapshot()
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The owner of each task, from the hosts' latest logged holdings.
pub(crate) fn owners(hosts: &[&HostProcess]) -> BTreeMap<i32, String> {
    let mut owners = BTreeMap::new();
    for h in hosts {
        if let Some((left, right)) = h.assignments().pop() {
            for p in left.iter().filter(|p| right.contains(p)) {
                owners.insert(*p, h.name.clone());
            }
        }
    }
    owners
}

/// The task of an output: order i sits in partition i % 6.
pub(crate) fn task_of(order: &str) -> Option<i32> {
    let i: i32 = order.strip_prefix("order-")?.parse().ok()?;
    Some(i % PARTITIONS)
}

/// The longest time a task went without an output within `[from, to]`, counting from `from` to
/// its first output and from its last to `to`.
pub(crate) fn longest_gap(
    outputs: &[ReadRecord],
    task: i32,
    from: Instant,
    to: Instant,
) -> Duration {
    let mut times: Vec<Instant> = outputs
        .iter()
        .filter(|r| r.arrived >= from && r.arrived <= to)
        .filter(|r| {
            let (order, _) = &order_outputs(std::slice::from_ref(r))[0];
            task_of(order) == Some(task)
        })
        .map(|r| r.arrived)
        .collect();
    times.insert(0, from);
    times.push(to);
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Records the hosts read, summed from their /metrics.
pub(crate) fn consumed(hosts: &[&HostProcess]) -> u64 {
    hosts
        .iter()
        .map(|h| {
            let page = http::get(&format!("{}/metrics", h.admin_url(Duration::from_secs(5)))).body;
            ["orders", "payments"]
                .iter()
                .filter_map(|t| {
                    http::sample(
                        &page,
                        &format!("cojoin_records_consumed_total{{topic=\"{t}\"}}"),
                    )
                })
                .sum::<f64>() as u64
        })
        .sum()
}
