//! The JSON forms of events and output records used on the command line: the event files of
//! `cojoin plugin call`, the recorded streams of `cojoin plugin test` (one event per line) and
//! the outputs and dead letters both print.
//!
//! An event file looks like
//! `{"topic": "orders", "partition": 0, "offset": 7, "timestamp": 1700000000000, "key": "o-1",
//! "value": {"amount": 12}}`. `key` and `value` are UTF-8 text; a JSON object or array given as
//! `value` is stored as its compact JSON text; `"value": null` (or no value) is a tombstone. Binary
//! data goes in `key_base64` / `value_base64` instead.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::event::{Event, Header, OutputRecord};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventJsonError {
    #[error("not a valid event: {0} (expected fields: topic, partition, offset, timestamp, key, value, headers)")]
    Shape(serde_json::Error),
    #[error("the event has no key: give \"key\" (text) or \"key_base64\" — records without a key cannot join")]
    MissingKey,
    #[error("field {field:?} is not valid base64: {error}")]
    Base64 {
        field: &'static str,
        error: base64::DecodeError,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventJson {
    #[serde(default)]
    topic: String,
    #[serde(default)]
    partition: i32,
    #[serde(default)]
    offset: i64,
    #[serde(default)]
    timestamp: i64,
    key: Option<String>,
    key_base64: Option<String>,
    #[serde(default)]
    value: Value,
    value_base64: Option<String>,
    #[serde(default)]
    headers: Map<String, Value>,
}

fn decode(field: &'static str, text: &str) -> Result<Vec<u8>, EventJsonError> {
    BASE64
        .decode(text)
        .map_err(|error| EventJsonError::Base64 { field, error })
}

/// Parses one event from its JSON form; without `key` or `key_base64` (or with `"key": null`)
/// it is a record without a key, as Kafka would deliver it.
pub fn event_from_json(text: &str) -> Result<Event, EventJsonError> {
    let raw: EventJson = serde_json::from_str(text).map_err(EventJsonError::Shape)?;
    let key = match (raw.key, raw.key_base64) {
        (_, Some(b64)) => Some(decode("key_base64", &b64)?),
        (Some(text), None) => Some(text.into_bytes()),
        (None, None) => None,
    };
    let value = match (raw.value, raw.value_base64) {
        (_, Some(b64)) => Some(decode("value_base64", &b64)?),
        (Value::Null, None) => None,
        (Value::String(s), None) => Some(s.into_bytes()),
        (other, None) => Some(other.to_string().into_bytes()),
    };
    let headers = raw
        .headers
        .into_iter()
        .map(|(key, v)| Header {
            key,
            value: match v {
                Value::Null => None,
                Value::String(s) => Some(s.into_bytes()),
                other => Some(other.to_string().into_bytes()),
            },
        })
        .collect();
    Ok(Event {
        topic: raw.topic.into(),
        partition: raw.partition,
        offset: raw.offset,
        timestamp: raw.timestamp,
        key: key.map(Into::into),
        value: value.map(Into::into),
        headers,
    })
}

/// [`event_from_json`] for an event a plugin is called with: it must have a key.
pub fn keyed_event_from_json(text: &str) -> Result<Event, EventJsonError> {
    let event = event_from_json(text)?;
    if event.key.is_none() {
        return Err(EventJsonError::MissingKey);
    }
    Ok(event)
}

/// Puts bytes under `name` as text when they are UTF-8, else under `name_base64`.
fn put_bytes(obj: &mut Map<String, Value>, name: &str, bytes: Option<&[u8]>) {
    match bytes.map(std::str::from_utf8) {
        None => {
            obj.insert(name.to_owned(), Value::Null);
        }
        Some(Ok(text)) => {
            obj.insert(name.to_owned(), Value::String(text.to_owned()));
        }
        Some(Err(_)) => {
            obj.insert(
                format!("{name}_base64"),
                Value::String(BASE64.encode(bytes.unwrap_or_default())),
            );
        }
    }
}

/// The JSON line printed for one output record.
pub fn output_to_json(record: &OutputRecord) -> Value {
    let mut obj = Map::new();
    obj.insert("topic".into(), json!(record.topic));
    put_bytes(&mut obj, "key", record.key.as_deref());
    put_bytes(&mut obj, "value", record.value.as_deref());
    let mut headers = Map::new();
    for h in &record.headers {
        put_bytes(&mut headers, &h.key, h.value.as_deref());
    }
    obj.insert("headers".into(), Value::Object(headers));
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_values_become_compact_json_and_null_is_a_tombstone() {
        let e = event_from_json(r#"{"topic":"t","key":"k","value":{"a": 1}}"#).unwrap();
        assert_eq!(e.value.as_deref(), Some(&b"{\"a\":1}"[..]));
        let e = event_from_json(r#"{"key":"k","value":null}"#).unwrap();
        assert_eq!(e.value, None);
    }

    #[test]
    fn a_missing_key_is_refused_with_the_fix() {
        let keyless = event_from_json(r#"{"topic":"t","value":"v"}"#).unwrap();
        assert_eq!(keyless.key, None);
        let err = keyed_event_from_json(r#"{"topic":"t","value":"v"}"#).unwrap_err();
        assert!(err.to_string().contains("key_base64"), "{err}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(event_from_json(r#"{"key":"k","vaule":"v"}"#).is_err());
    }

    #[test]
    fn binary_output_is_base64() {
        let rec = OutputRecord {
            topic: None,
            key: Some(vec![0xff, 0x00]),
            value: Some(b"ok".to_vec()),
            headers: vec![],
        };
        let v = output_to_json(&rec);
        assert_eq!(v["key_base64"], "/wA=");
        assert_eq!(v["value"], "ok");
    }
}
