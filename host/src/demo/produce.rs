//! Producing a generated stream to Kafka in (compressed) real time: the demo's embedded broker,
//! or a real one for `cojoin generate`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use super::shop::Shop;
use super::stream::Planned;

/// A producer for the generated stream: the Java-compatible partitioner, so that each key sits in
/// the same partition number of every topic.
pub(super) fn stream_producer(bootstrap: &str) -> Result<BaseProducer> {
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
    planned: Vec<Planned>,
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
        let record = BaseRecord::to(p.topic)
            .key(&p.key)
            .payload(&p.value)
            .timestamp(base_ts + p.timestamp);
        crate::kafka::sink::send_with_room(producer, record)
            .with_context(|| format!("producing to {}", p.topic))?;
        sent(&p.key);
        count += 1;
    }
    producer
        .flush(Duration::from_secs(30))
        .context("records not acknowledged within 30 s")?;
    Ok(count)
}

/// `cojoin generate`: the demo's stream of `shop`, produced to its topics (`orders` and
/// `payments`, and `shipments` for three) of a real broker. Returns the number of records
/// produced.
pub fn generate(
    shop: Shop,
    bootstrap: &str,
    events: usize,
    seed: u64,
    speed: i64,
    stop: &AtomicBool,
) -> Result<usize> {
    let producer = stream_producer(bootstrap)?;
    let (planned, _) = shop.generate(events, seed);
    produce_stream(&producer, planned, speed, stop, |_| {})
}
