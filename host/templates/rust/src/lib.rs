//! {{name}}: a cojoin join action, in Rust (wit-bindgen).
//!
//! cojoin calls `on_match` for every pair of events with the same key within the join window (`a`
//! from `join.left`, `b` from `join.right` in cojoin.toml), and `on_expire` for an event whose
//! window closed with no partner (left and outer joins). Each returns the records to produce, or
//! an error: the host retries the call, then dead-letters its inputs.
//!
//! This skeleton produces, to the output topic:
//! - a match: `{"key", "status": "matched", "left", "right", "at"}`
//! - an expired event: `{"key", "status": "unmatched", "side", "value"}`
//!
//! Check: `cargo test`. Build: `cojoin plugin build`. Replay: `cojoin plugin test`.

wit_bindgen::generate!({ path: "wit", world: "plugin" });

use cojoin::plugin::host::{log, Level};
use serde_json::{json, Value};

struct Plugin;

impl Guest for Plugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        log(Level::Info, &format!("{{name}} ready, {} config entries", config.len()));
        Ok(())
    }

    fn on_match(key: Vec<u8>, a: Event, b: Event) -> Result<Vec<OutputRecord>, String> {
        Ok(vec![matched(key, &a, &b)])
    }

    fn on_expire(key: Vec<u8>, event: Event, side: Side) -> Result<Vec<OutputRecord>, String> {
        Ok(vec![unmatched(key, &event, side)])
    }
}

export!(Plugin);

// The logic lives in plain functions, apart from the host calls (`log`), so that `cargo test`
// runs it on this machine.

fn matched(key: Vec<u8>, a: &Event, b: &Event) -> OutputRecord {
    let body = json!({
        "key": String::from_utf8_lossy(&key),
        "status": "matched",
        "left": value_json(a),
        "right": value_json(b),
        "at": a.timestamp.max(b.timestamp),
    });
    record(key, body)
}

fn unmatched(key: Vec<u8>, event: &Event, side: Side) -> OutputRecord {
    let body = json!({
        "key": String::from_utf8_lossy(&key),
        "status": "unmatched",
        "side": match side { Side::Left => "left", Side::Right => "right" },
        "value": value_json(event),
    });
    record(key, body)
}

/// The event's value: parsed when it is JSON, else text; null for a tombstone.
fn value_json(event: &Event) -> Value {
    match &event.value {
        None => Value::Null,
        Some(bytes) => serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())),
    }
}

/// A record to the host's output topic (`topic: None`).
fn record(key: Vec<u8>, body: Value) -> OutputRecord {
    OutputRecord {
        topic: None,
        key: Some(key),
        value: Some(body.to_string().into_bytes()),
        headers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &str, key: &str, value: Option<&str>, timestamp: i64) -> Event {
        Event {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            timestamp,
            key: key.as_bytes().to_vec(),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    fn body(record: &OutputRecord) -> Value {
        assert_eq!(record.topic, None, "to the host's output topic");
        serde_json::from_slice(record.value.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn a_match_gives_one_record_with_both_values() {
        let a = event("orders", "order-1", Some(r#"{"amount": 20}"#), 1_764_680_400_000);
        let b = event("payments", "order-1", Some(r#"{"method": "card"}"#), 1_764_680_405_000);
        let out = matched(b"order-1".to_vec(), &a, &b);
        assert_eq!(out.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(
            body(&out),
            json!({"key": "order-1", "status": "matched", "left": {"amount": 20},
                   "right": {"method": "card"}, "at": 1_764_680_405_000i64})
        );
    }

    #[test]
    fn an_event_left_alone_is_reported_unmatched_with_its_side() {
        let e = event("orders", "order-2", Some(r#"{"amount": 35}"#), 1_764_680_401_000);
        let out = unmatched(b"order-2".to_vec(), &e, Side::Left);
        assert_eq!(
            body(&out),
            json!({"key": "order-2", "status": "unmatched", "side": "left", "value": {"amount": 35}})
        );
    }

    #[test]
    fn a_value_that_is_not_json_is_passed_as_text_and_a_tombstone_as_null() {
        let text = event("payments", "p", Some("not json"), 0);
        assert_eq!(body(&unmatched(b"p".to_vec(), &text, Side::Right))["value"], "not json");
        let tombstone = event("payments", "p", None, 0);
        assert_eq!(body(&unmatched(b"p".to_vec(), &tombstone, Side::Right))["value"], Value::Null);
    }
}
