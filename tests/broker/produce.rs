//! Producing to a broker: producers (batching as librdkafka does), producing test records,
//! and one probe record whose delivery report says whether its user may write the topic.

use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::Kafka;
use crate::stream::Record;

impl Kafka {
    pub fn producer(&self, partitioner: &str) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_with(&self.bootstrap, partitioner, &self.admin_settings())
    }

    /// A producer for the plaintext broker at `bootstrap`, for a thread that does not own the
    /// `Kafka`. Batches as librdkafka does by default.
    pub fn producer_for(
        bootstrap: &str,
        partitioner: &str,
    ) -> ThreadedProducer<DefaultProducerContext> {
        Self::producer_with(bootstrap, partitioner, &[])
    }

    /// [`Kafka::producer_for`] with librdkafka `settings` on top, e.g. [`Kafka::admin_settings`]
    /// for a secured broker.
    pub fn producer_with(
        bootstrap: &str,
        partitioner: &str,
        settings: &[(String, String)],
    ) -> ThreadedProducer<DefaultProducerContext> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("partitioner", partitioner);
        for (k, v) in settings {
            config.set(k, v);
        }
        config
            .create()
            .unwrap_or_else(|e| panic!("a producer for {bootstrap}: {e}"))
    }

    /// Produces one record to `topic` through a new producer with `settings` (e.g. from
    /// [`Kafka::cojoin_kafka_settings`]) and waits for its delivery report: `Ok` once the broker
    /// acknowledged it, else the broker's refusal (`MessageProduction(TopicAuthorizationFailed)`)
    /// or a refused login (`Global(Authentication)`). Gives up after 15 s.
    pub fn try_produce(
        bootstrap: &str,
        settings: &[(String, String)],
        topic: &str,
    ) -> Result<(), KafkaError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            // A refused topic fails the record at once, a refused login is reported at once
            // (below); anything else that keeps it from the broker fails it here, before the
            // poll below gives up.
            .set("message.timeout.ms", "10000");
        for (k, v) in settings {
            config.set(k, v);
        }
        let producer: BaseProducer<DeliveryReport> = config
            .create_with_context(DeliveryReport::default())
            .unwrap_or_else(|e| panic!("a producer for {bootstrap}: {e}"));
        producer
            .send(BaseRecord::to(topic).key("probe").payload("probe"))
            .map_err(|(e, _)| e)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            producer.poll(Duration::from_millis(100));
            if let Some(result) = producer.context().0.lock().unwrap().take() {
                return result;
            }
        }
        panic!("producing to {topic} on {bootstrap}: no delivery report after 15 s")
    }

    /// Produces `records`, keyed, to their topic; `partition` pins them when given.
    pub fn produce(
        &self,
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        Self::produce_with(producer, records, partition)
    }

    /// [`Kafka::produce`] without the broker at hand.
    pub fn produce_with(
        producer: &ThreadedProducer<DefaultProducerContext>,
        records: &[Record],
        partition: Option<i32>,
    ) {
        for r in records {
            let mut record = BaseRecord::to(r.topic)
                .key(&r.key)
                .payload(&r.value)
                .timestamp(r.timestamp);
            record.partition = partition;
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        assert!(
                            e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull),
                            "producing to {}: {e}",
                            r.topic
                        );
                        record = back;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
    }
}

/// The delivery report of [`Kafka::try_produce`]'s one record, or the refusal of its login.
#[derive(Default)]
struct DeliveryReport(std::sync::Mutex<Option<Result<(), KafkaError>>>);

impl ClientContext for DeliveryReport {
    /// librdkafka keeps a record whose login was refused queued (it retries the login) until the
    /// record times out; the refusal itself comes here, at once.
    fn error(&self, error: KafkaError, _reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            self.0.lock().unwrap().get_or_insert(Err(error));
        }
    }
}

impl ProducerContext for DeliveryReport {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone());
        *self.0.lock().unwrap() = Some(outcome);
    }
}
