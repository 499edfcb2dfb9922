//! A topic read on a thread of its own, from its start (read_committed), each record with the
//! instant it arrived: what the scaling tests and the latency benchmark time outputs by.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::broker::{Kafka, ReadRecord};

/// Reads the output topic on its own thread, so that arrival times are not bunched by the test's
/// waits.
pub struct Outputs {
    records: Arc<Mutex<Vec<ReadRecord>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Outputs {
    pub fn start(kafka: &Kafka) -> Outputs {
        Outputs::start_on(kafka, "orders-paid")
    }

    /// Reads `topic` (from its start) on a thread of its own.
    pub fn start_on(kafka: &Kafka, topic: &str) -> Outputs {
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

    /// When the first record was read, if one was.
    pub fn first_arrived(&self) -> Option<Instant> {
        self.records.lock().unwrap().first().map(|r| r.arrived)
    }

    pub fn snapshot(&self) -> Vec<ReadRecord> {
        self.records.lock().unwrap().clone()
    }

    /// Waits until `done` holds of what was read (or `timeout`), then `settle` more.
    pub fn wait(
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
