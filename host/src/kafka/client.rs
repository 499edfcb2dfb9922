//! librdkafka client configuration from `[kafka]`: one place that says what the consumer and the
//! producer get. `kafka.options` go to the client they belong to (librdkafka's property scopes,
//! from its CONFIGURATION.md), so a consumer setting such as `session.timeout.ms` no longer makes
//! the producer print a CONFWARN line on every start.

use rdkafka::config::ClientConfig;

use crate::config::{Compression, KafkaConfig};
use crate::kafka::protocol::Protocol;

/// librdkafka properties only a consumer reads (scope `C`, global and topic).
const CONSUMER_ONLY: &[&str] = &[
    "group.id",
    "group.instance.id",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.protocol.type",
    "group.protocol",
    "group.remote.assignor",
    "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.error.backoff.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "auto.offset.reset",
    "consume.callback.max.messages",
];

/// librdkafka properties only a producer reads (scope `P`, global and topic).
const PRODUCER_ONLY: &[&str] = &[
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.ms",
    "linger.ms",
    "message.send.max.retries",
    "retries",
    "queue.buffering.backpressure.threshold",
    "compression.codec",
    "compression.type",
    "compression.level",
    "batch.num.messages",
    "batch.size",
    "delivery.report.only.error",
    "sticky.partitioning.linger.ms",
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "queuing.strategy",
    "produce.offset.report",
    "partitioner",
];

/// Which clients an option is for.
#[derive(Debug, PartialEq, Eq)]
enum Scope {
    Consumer,
    Producer,
    Both,
}

fn scope(option: &str) -> Scope {
    if CONSUMER_ONLY.contains(&option) {
        Scope::Consumer
    } else if PRODUCER_ONLY.contains(&option) {
        Scope::Producer
    } else {
        Scope::Both
    }
}

/// The settings every client of this host shares.
pub fn base(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &kafka.bootstrap_servers);
    for (k, v) in &kafka.options {
        if scope(k) == Scope::Both {
            c.set(k, v);
        }
    }
    c
}

/// The consumer of the joined topics: cojoin's settings, then the consumer's `kafka.options`
/// (which win). `prefetch_limit` bounds what librdkafka fetches ahead of the tasks.
pub fn consumer(kafka: &KafkaConfig, protocol: Protocol, prefetch_limit: u64) -> ClientConfig {
    let mut c = base(kafka);
    match protocol {
        Protocol::Classic => c.set("partition.assignment.strategy", "range"),
        // The broker's range assignor keeps partition p of both topics on one member, and is
        // sticky (KIP-848).
        Protocol::Consumer => c
            .set("group.protocol", "consumer")
            .set("group.remote.assignor", "range"),
    };
    c.set("group.id", &kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        // librdkafka pauses a partition's fetching for this long once its local queue is full
        // (default 1 s); with a slow plugin the queue then ran dry while waiting: 84k → 95k
        // records/s with the Python plugin (BENCHMARKS.md).
        .set("fetch.queue.backoff.ms", "20")
        // Part of memory.queue_bytes (task/backpressure.rs). librdkafka caps fetch.max.bytes by
        // it too (at least message.max.bytes); its default is 64 MiB on top of any budget.
        .set(
            "queued.max.messages.kbytes",
            (prefetch_limit / 1024).clamp(1024, 2_097_151).to_string(),
        );
    if let Some(id) = &kafka.instance_id {
        c.set("group.instance.id", id);
    }
    for (k, v) in &kafka.options {
        if scope(k) == Scope::Consumer {
            c.set(k, v);
        }
    }
    c
}

/// The producer of outputs, dead letters and the repartition step's internal topics: idempotent,
/// batches compressed with `compression` (`output.compression`), then the producer's
/// `kafka.options`.
pub fn producer(kafka: &KafkaConfig, compression: Compression) -> ClientConfig {
    let mut c = base(kafka);
    c.set("enable.idempotence", "true")
        .set("compression.type", compression.as_str());
    for (k, v) in &kafka.options {
        if scope(k) == Scope::Producer {
            // `compression.codec` is librdkafka's alias of `compression.type`: with both in the
            // config, which one it applies last depends on the map's order.
            if k == "compression.codec" {
                c.remove("compression.type");
            }
            c.set(k, v);
        }
    }
    c
}

/// Options about membership in a consumer group, which a reader outside the group does not use
/// (and which librdkafka checks against one another: `max.poll.interval.ms` below the classic
/// default `session.timeout.ms` refuses the client).
const MEMBERSHIP: [&str; 4] = [
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
];

/// A consumer outside the group (metadata, sampling): `group` names it.
pub fn reader(kafka: &KafkaConfig, group: &str) -> ClientConfig {
    let mut c = base(kafka);
    c.set("group.id", group).set("enable.auto.commit", "false");
    for (k, v) in &kafka.options {
        let membership = k.starts_with("group.") || MEMBERSHIP.contains(&k.as_str());
        if scope(k) == Scope::Consumer && !membership {
            c.set(k, v);
        }
    }
    c
}

/// Partition count of `topic` from the broker's metadata (0 for a topic that does not exist).
pub fn topic_partitions<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    topic: &str,
) -> anyhow::Result<usize> {
    use anyhow::Context as _;
    let metadata = rdkafka::consumer::Consumer::fetch_metadata(
        consumer,
        Some(topic),
        super::timeouts::REQUEST,
    )
    .with_context(|| {
        format!("reading metadata of topic {topic:?} (is kafka.bootstrap_servers right?)")
    })?;
    Ok(metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none())
        .map_or(0, |t| t.partitions().len()))
}

/// (low, high) watermarks of a partition as the consumer last saw them in a fetch response (no
/// broker round trip; rdkafka 0.38 wraps only the blocking `fetch_watermarks`).
pub fn cached_watermarks<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    topic: &str,
    p: i32,
) -> Option<(i64, i64)> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer lives as long as `consumer`; the out-pointers are valid locals.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            rdkafka::consumer::Consumer::client(consumer).native_ptr(),
            topic.as_ptr(),
            p,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some((low, high))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_option_goes_to_the_client_that_reads_it_and_wins_there() {
        let kafka = KafkaConfig {
            bootstrap_servers: "b:9092".into(),
            group_id: "g".into(),
            instance_id: None,
            group_protocol: Default::default(),
            options: [
                ("session.timeout.ms", "6000"),
                ("linger.ms", "5"),
                ("security.protocol", "ssl"),
                ("fetch.queue.backoff.ms", "100"),
            ]
            .into(),
        };
        let c = consumer(&kafka, Protocol::Classic, 16 << 20);
        let p = producer(&kafka, Compression::None);
        assert_eq!(c.get("session.timeout.ms"), Some("6000"));
        assert_eq!(p.get("session.timeout.ms"), None);
        assert_eq!(p.get("linger.ms"), Some("5"));
        assert_eq!(c.get("linger.ms"), None);
        assert_eq!(c.get("security.protocol"), Some("ssl"));
        assert_eq!(p.get("security.protocol"), Some("ssl"));
        assert_eq!(
            c.get("fetch.queue.backoff.ms"),
            Some("100"),
            "the user's option wins"
        );
        assert_eq!(p.get("enable.idempotence"), Some("true"));
        let reader = reader(&kafka, "g-check");
        assert_eq!(reader.get("group.id"), Some("g-check"));
        assert_eq!(
            reader.get("session.timeout.ms"),
            None,
            "a reader joins no group"
        );
        assert_eq!(reader.get("fetch.queue.backoff.ms"), Some("100"));
    }

    #[test]
    fn the_producer_compresses_with_output_compression_unless_kafka_options_say_otherwise() {
        fn with_options<const N: usize>(options: [(&str, &str); N]) -> KafkaConfig {
            KafkaConfig {
                bootstrap_servers: "b:9092".into(),
                group_id: "g".into(),
                instance_id: None,
                group_protocol: Default::default(),
                options: options.into(),
            }
        }
        let plain = with_options([]);
        assert_eq!(
            producer(&plain, Compression::None).get("compression.type"),
            Some("none")
        );
        assert_eq!(
            producer(&plain, Compression::Zstd).get("compression.type"),
            Some("zstd")
        );
        let consumer = consumer(&plain, Protocol::Classic, 16 << 20);
        assert_eq!(
            consumer.get("compression.type"),
            None,
            "a consumer reads any codec"
        );

        let user = with_options([("compression.type", "gzip")]);
        assert_eq!(
            producer(&user, Compression::Zstd).get("compression.type"),
            Some("gzip"),
            "the user's option wins"
        );
        let alias = with_options([("compression.codec", "lz4")]);
        let p = producer(&alias, Compression::Zstd);
        assert_eq!(
            (p.get("compression.codec"), p.get("compression.type")),
            (Some("lz4"), None),
            "the user's alias wins, not cojoin's setting under the other name"
        );
        // librdkafka takes each name and value (the zstd and lz4 codecs are built in).
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            producer(&plain, codec)
                .create::<rdkafka::producer::BaseProducer>()
                .unwrap_or_else(|e| panic!("{codec:?}: {e}"));
        }
    }

    #[test]
    fn the_new_protocol_asks_the_broker_for_its_range_assignor_and_sets_no_client_assignor() {
        let kafka = KafkaConfig {
            bootstrap_servers: "b:9092".into(),
            group_id: "g".into(),
            instance_id: Some("host-1".into()),
            group_protocol: Default::default(),
            options: Default::default(),
        };
        let c = consumer(&kafka, Protocol::Consumer, 16 << 20);
        assert_eq!(c.get("group.protocol"), Some("consumer"));
        assert_eq!(c.get("group.remote.assignor"), Some("range"));
        assert_eq!(c.get("partition.assignment.strategy"), None);
        assert_eq!(c.get("group.instance.id"), Some("host-1"));
        let classic = consumer(&kafka, Protocol::Classic, 16 << 20);
        assert_eq!(classic.get("partition.assignment.strategy"), Some("range"));
        assert_eq!(classic.get("group.protocol"), None);
    }
}
