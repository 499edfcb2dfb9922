//! Waiting for a producer's delivery reports without spinning.
//!
//! rdkafka's `BaseProducer::poll(t)` polls its queue until `t` has passed (it does not return at
//! the first event), and it hands librdkafka the time left in whole milliseconds, so below one it
//! polls without waiting: `poll(1 ms)` spins for the whole millisecond. The host waited for each
//! round's acknowledgements that way, and a profile of cojoin-python on Kafka found 4 % of its
//! CPU reading the clock in that loop (BENCHMARKS.md). `flush` waits out 100 ms steps instead.
//! Here the reports are served one event at a time without waiting, with short naps when none
//! is there yet.

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

/// The first nap, and the longest (what a wait may overrun the last acknowledgement by).
const FIRST_NAP: Duration = Duration::from_micros(50);
const LONGEST_NAP: Duration = Duration::from_millis(1);

/// While a wait lasts, `keep_alive` is called this often (the run loop polls its consumer).
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(500);

/// Serves delivery reports until nothing is in flight (true), or until `deadline` (false).
pub fn wait_delivered<C: ProducerContext>(producer: &BaseProducer<C>, deadline: Instant) -> bool {
    wait_delivered_alive(producer, deadline, &mut || {})
}

/// [`wait_delivered`], calling `keep_alive` every [`KEEP_ALIVE_EVERY`] while it waits.
pub fn wait_delivered_alive<C: ProducerContext>(
    producer: &BaseProducer<C>,
    deadline: Instant,
    keep_alive: &mut dyn FnMut(),
) -> bool {
    let mut nap = FIRST_NAP;
    let mut kept_alive = Instant::now();
    if producer.in_flight_count() > 0 {
        send_now(producer);
    }
    loop {
        let before = producer.in_flight_count();
        if before == 0 {
            return true;
        }
        // Serves one event (a produce request's delivery reports) if there is one.
        producer.poll(Duration::ZERO);
        let after = producer.in_flight_count();
        if after == 0 {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        if now - kept_alive >= KEEP_ALIVE_EVERY {
            keep_alive();
            kept_alive = now;
        }
        if after < before {
            nap = FIRST_NAP;
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(LONGEST_NAP);
        }
    }
}

/// Has librdkafka send what it queued now instead of after `linger.ms` (5 ms by default): the
/// caller is about to wait for it, and nothing more will join this batch. A round at a low rate
/// waited out the linger each time (bench-latency: p50 17.4 ms with it, 11.3 ms at linger 0).
///
/// `rd_kafka_flush` tells the broker threads to treat the linger as passed while it lasts; under
/// the event API rust-rdkafka uses, it serves nothing and only waits (here at most 1 ms) for the
/// messages in flight to be gone, which they are not until their reports are served: a
/// millisecond of a wait for acknowledgements that lasts a produce round trip anyway. (rdkafka's
/// own `flush` calls it with no wait, and its doc warns that a broker thread may then not wake in
/// time.)
fn send_now<C: ProducerContext>(producer: &BaseProducer<C>) {
    // SAFETY: the pointer is the producer's own handle, alive as long as `producer`.
    unsafe {
        rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext};
    use rdkafka::ClientConfig;

    /// CPU time this thread has run, from the kernel's scheduler statistics.
    fn thread_cpu() -> Duration {
        let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        Duration::from_nanos(stat.split_whitespace().next().unwrap().parse().unwrap())
    }

    /// A mock cluster with topic `t` of `partitions`, and a producer that has already delivered
    /// one message to it (connected, the topic known) before a test times anything.
    fn connected(
        partitions: i32,
    ) -> (
        MockCluster<'static, DefaultProducerContext>,
        BaseProducer<DefaultProducerContext>,
    ) {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("t", partitions, 1).unwrap();
        let producer: BaseProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("message.timeout.ms", "30000")
            .create()
            .unwrap();
        send(&producer, 1);
        assert!(wait_delivered(
            &producer,
            Instant::now() + Duration::from_secs(10)
        ));
        (cluster, producer)
    }

    fn send(producer: &BaseProducer<DefaultProducerContext>, n: usize) {
        for i in 0..n {
            let key = format!("k{i}");
            producer
                .send(BaseRecord::to("t").key(&key).payload("v"))
                .unwrap();
        }
    }

    #[test]
    fn a_wait_for_slow_acknowledgements_returns_when_they_come_and_sleeps_meanwhile() {
        let (cluster, producer) = connected(3);
        cluster
            .broker_round_trip_time(1, Duration::from_millis(400))
            .unwrap();
        send(&producer, 100);
        let (started, cpu) = (Instant::now(), thread_cpu());
        assert!(wait_delivered(&producer, started + Duration::from_secs(10)));
        let (waited, used) = (started.elapsed(), thread_cpu() - cpu);
        assert_eq!(producer.in_flight_count(), 0);
        assert!(waited >= Duration::from_millis(300), "waited {waited:?}");
        // The spinning poll used the whole wait; naps use a few milliseconds of it.
        assert!(used < waited / 4, "{used:?} of CPU in a wait of {waited:?}");
    }

    #[test]
    fn a_wait_gives_up_at_its_deadline_when_the_broker_is_down() {
        let (cluster, producer) = connected(1);
        cluster.broker_down(1).unwrap();
        send(&producer, 10);
        let started = Instant::now();
        assert!(!wait_delivered(
            &producer,
            started + Duration::from_millis(300)
        ));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
            "waited {waited:?}"
        );
        assert!(producer.in_flight_count() > 0);
    }
}
