//! Which output topics exist, so an output to a missing topic is refused at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientContext;

use super::Deliveries;

use crate::kafka::timeouts::SINK_METADATA as METADATA_TIMEOUT;
/// A topic found missing is looked up again after this long (someone may have created it).
const RECHECK_MISSING: Duration = Duration::from_secs(10);

/// Which topics exist, looked up once each (missing ones again after [`RECHECK_MISSING`]), so an
/// output to a missing topic is refused at once instead of waiting out librdkafka's metadata
/// timeouts (the host looked healthy for 300 s while producing nothing).
#[derive(Default)]
pub(super) struct KnownTopics {
    found: HashMap<String, (bool, Instant)>,
}

impl KnownTopics {
    pub(super) fn missing(&mut self, producer: &BaseProducer<Deliveries>, topic: &str) -> bool {
        if let Some((exists, at)) = self.found.get(topic) {
            if *exists || at.elapsed() < RECHECK_MISSING {
                return !exists;
            }
        }
        let exists = match topic_exists(producer.client(), topic) {
            Ok(exists) => exists,
            // The broker did not answer: let the producer try (it retries) rather than refuse.
            Err(e) => {
                tracing::warn!(topic, "could not look the topic up: {e}");
                return false;
            }
        };
        self.found
            .insert(topic.to_owned(), (exists, Instant::now()));
        !exists
    }
}

/// Whether `topic` exists, from the broker's metadata.
pub fn topic_exists<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> Result<bool> {
    let metadata = client
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .with_context(|| format!("reading the metadata of topic {topic:?}"))?;
    // Only "no such topic" (or no right to see it) means missing: a topic being created, or
    // whose leader moves, answers LEADER_NOT_AVAILABLE for a moment, and the producer waits.
    use rdkafka::types::RDKafkaRespErr as E;
    Ok(match metadata.topics().iter().find(|t| t.name() == topic) {
        None => false,
        Some(t) => !matches!(
            t.error(),
            Some(
                E::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                    | E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
            )
        ),
    })
}
