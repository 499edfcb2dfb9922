//! The headers of what the sink writes besides plain outputs: dead letters (why, where from, what
//! was stripped to fit) and the outputs' own headers.

use rdkafka::message::{Header, OwnedHeaders};

use super::Stripped;
use crate::event::Event;
use crate::task::DeadLetter;

/// A plugin failure or refused output is a warning; a record routed by policy (late, no key,
/// tombstone) is expected traffic, counted in the metrics.
pub(super) fn log_dead_letter(d: &DeadLetter, input: &Event, dlq: &str) {
    let (kind, message) = (d.reason.kind(), d.reason.message());
    let key = crate::event::printable_key(input.key_bytes());
    let record = crate::event::positions([input]);
    if d.reason.is_failure() {
        tracing::warn!(kind, %key, %record, dead_letter_topic = dlq, "dead-lettered: {message}");
    } else {
        tracing::info!(kind, %key, %record, dead_letter_topic = dlq, "dead-lettered: {message}");
    }
}

/// The input's own headers, then what happened and where the record came from; what was left
/// out when the whole was refused.
pub(super) fn dead_letter_headers(
    d: &DeadLetter,
    input: &Event,
    stripped: Stripped,
) -> OwnedHeaders {
    let own = if stripped == Stripped::KeyValueAndHeaders {
        OwnedHeaders::new()
    } else {
        kafka_headers(&input.headers)
    };
    let headers = error_headers(
        own,
        d.reason.kind(),
        d.reason.message(),
        Some(d.reason.plugin_version()),
        (&input.topic, input.partition, input.offset, input.timestamp),
    );
    omission_headers(
        headers,
        stripped,
        input.key.as_deref(),
        input.value.as_deref().map_or(0, <[u8]>::len),
        input.headers.len(),
    )
}

/// What a stripped dead letter left out, after its error headers: the sink's and the repartition
/// step's. `key`, `value_len` and `header_count` are the source record's.
pub(crate) fn omission_headers(
    headers: OwnedHeaders,
    stripped: Stripped,
    key: Option<&[u8]>,
    value_len: usize,
    header_count: usize,
) -> OwnedHeaders {
    match stripped {
        Stripped::Nothing => headers,
        Stripped::Value => headers.insert(Header {
            key: "cojoin.value.omitted",
            value: Some(&b"the dead-letter topic refused the value; read it from the source topic at the offset above"[..]),
        }),
        Stripped::KeyValueAndHeaders => {
            use sha2::Digest;
            let key = key.unwrap_or_default();
            let digest = hex::encode(sha2::Sha256::digest(key));
            let sizes = format!(
                "key {} bytes, value {value_len} bytes, {header_count} headers",
                key.len()
            );
            headers
                .insert(Header {
                    key: "cojoin.value.omitted",
                    value: Some(&b"the dead-letter topic refused the record even without its value; its key, value and headers are left out: read them from the source topic at the offset above"[..]),
                })
                .insert(Header {
                    key: "cojoin.key.sha256",
                    value: Some(digest.as_bytes()),
                })
                .insert(Header {
                    key: "cojoin.source.sizes",
                    value: Some(sizes.as_bytes()),
                })
        }
    }
}

/// `base` (a dead letter's own headers), then `cojoin.error.kind`, `cojoin.error.message`,
/// `cojoin.plugin.version` (when given) and the source record's topic, partition, offset and
/// timestamp: the dead-letter headers of the sink and of the repartition step.
pub(crate) fn error_headers(
    base: OwnedHeaders,
    kind: &str,
    message: &str,
    plugin_version: Option<&str>,
    (topic, partition, offset, timestamp): (&str, i32, i64, i64),
) -> OwnedHeaders {
    let (partition, offset, timestamp) = (
        partition.to_string(),
        offset.to_string(),
        timestamp.to_string(),
    );
    let pairs = [
        ("cojoin.error.kind", Some(kind)),
        ("cojoin.error.message", Some(message)),
        ("cojoin.plugin.version", plugin_version),
        ("cojoin.source.topic", Some(topic)),
        ("cojoin.source.partition", Some(partition.as_str())),
        ("cojoin.source.offset", Some(offset.as_str())),
        ("cojoin.source.timestamp", Some(timestamp.as_str())),
    ];
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .fold(base, |headers, (key, value)| {
            headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            })
        })
}

pub(super) fn kafka_headers(headers: &[crate::event::Header]) -> OwnedHeaders {
    headers.iter().fold(OwnedHeaders::new(), |hs, h| {
        hs.insert(Header {
            key: &h.key,
            value: h.value.as_deref(),
        })
    })
}
