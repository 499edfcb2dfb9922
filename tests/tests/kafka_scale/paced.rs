//! The paced stream the scaling tests run under: orders (three in four paid) at [`RATE`] per
//! second of wall time in real event time, produced on their own thread until stopped, and the
//! payments that close every window at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cojoin_e2e::broker::Kafka;
use cojoin_e2e::scenario::PARTITIONS;
use cojoin_e2e::stream::{self, Record};

/// Orders per second of wall time while the stream flows.
pub(crate) const RATE: u32 = 100;

/// Event time between orders: [`RATE`] orders per second of wall time is real time, so a join
/// window (10 s) holds 10 s of the stream, as it would in production, and a restarted task
/// replays that much.
pub(crate) const SPACING_MS: i64 = 1000 / RATE as i64;

/// Order i and its payment (unless i % 4 == 0), stamped i × [`SPACING_MS`] (the payment 20 ms
/// later).
pub(crate) fn order(i: u32) -> Vec<Record> {
    order_at(i, RATE)
}

/// Order i and its payment (unless i % 4 == 0) at `rate` orders per second in real event time:
/// stamped i × 1000 / `rate` ms, the payment two orders' spacing later.
pub(crate) fn order_at(i: u32, rate: u32) -> Vec<Record> {
    let mut records = stream::orders(i, i + 1);
    for r in &mut records {
        // stream::orders spaces orders 1 s apart and pays 2 s later: scale both down.
        r.timestamp = stream::BASE_TS + (r.timestamp - stream::BASE_TS) / i64::from(rate);
    }
    records
}

/// Produces orders from `from` at [`RATE`] per second, order i (and its payment) pinned to
/// partition i % 6, until `stop`; returns the next order number.
pub(crate) fn produce_paced(
    bootstrap: String,
    from: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let producer = Kafka::producer_for(&bootstrap, "murmur2_random");
        let started = Instant::now();
        let mut next = from;
        while !stop.load(Ordering::Relaxed) {
            let due = from + (started.elapsed().as_secs_f64() * f64::from(RATE)) as u32;
            for p in 0..PARTITIONS {
                let records: Vec<Record> = (next..due)
                    .filter(|i| (i % PARTITIONS as u32) as i32 == p)
                    .flat_map(order)
                    .collect();
                Kafka::produce_with(&producer, &records, Some(p));
            }
            next = next.max(due);
            std::thread::sleep(Duration::from_millis(20));
        }
        next
    })
}

/// A payment per partition far past the last order: every window closes.
pub(crate) fn close_after(kafka: &Kafka, orders: u32) {
    let producer = kafka.producer("murmur2_random");
    for p in 0..PARTITIONS {
        let tick = Record {
            topic: "payments",
            key: format!("tick-{p}"),
            value: "{}".into(),
            timestamp: stream::BASE_TS + i64::from(orders) * SPACING_MS + 60_000,
        };
        kafka.produce(&producer, &[tick], Some(p));
    }
}
