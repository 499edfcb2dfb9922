//! {{name}}: a cojoin join action over several topics, in Rust (wit-bindgen, world `plugin-n`).
//!
//! cojoin calls `on_match_n` with one event of each topic in `join.topics` (cojoin.toml), in that
//! order, for every combination of events with the same key whose timestamps lie within the join
//! window of each other; and, in a left join, `on_expire_n` for an event of the first topic that
//! took part in no match by the time its window closed, with the partners it did find (one list
//! per later topic). `on_batch_n` takes many such calls at once. Each returns the records to
//! produce, or an error: the host retries the call, then dead-letters its inputs.
//!
//! This skeleton produces, to the output topic:
//! - a match: `{"key", "status": "matched", "events": [each topic's value], "at"}`
//! - an expired event: `{"key", "status": "unmatched", "value", "partners": [events per later topic]}`
//!
//! Check: `cargo test`. Build: `cojoin plugin build`. Replay: `cojoin plugin test`.

wit_bindgen::generate!({ path: "wit", world: "plugin-n" });

use cojoin::plugin::host::{log, Level};
use serde_json::{json, Value};

struct Plugin;

impl Guest for Plugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        log(Level::Info, &format!("{{name}} ready, {} config entries", config.len()));
        Ok(())
    }

    fn on_match_n(key: Vec<u8>, events: Vec<Event>) -> Result<Vec<OutputRecord>, String> {
        Ok(vec![matched(key, &events)])
    }

    fn on_expire_n(
        key: Vec<u8>,
        event: Event,
        partners: Vec<Vec<Event>>,
    ) -> Result<Vec<OutputRecord>, String> {
        Ok(vec![unmatched(key, &event, &partners)])
    }

    /// Many calls at once, one outcome each, in order.
    fn on_batch_n(calls: Vec<CallN>) -> Vec<Outcome> {
        calls
            .into_iter()
            .map(|call| match call {
                CallN::OnMatchN(m) => Self::on_match_n(m.key, m.events),
                CallN::OnExpireN(x) => Self::on_expire_n(x.key, x.event, x.partners),
            })
            .collect()
    }
}

export!(Plugin);

// The logic lives in plain functions, apart from the host calls (`log`), so that `cargo test`
// runs it on this machine.

fn matched(key: Vec<u8>, events: &[Event]) -> OutputRecord {
    let body = json!({
        "key": String::from_utf8_lossy(&key),
        "status": "matched",
        "events": events.iter().map(value_json).collect::<Vec<_>>(),
        "at": events.iter().map(|e| e.timestamp).max(),
    });
    record(key, body)
}

fn unmatched(key: Vec<u8>, event: &Event, partners: &[Vec<Event>]) -> OutputRecord {
    let body = json!({
        "key": String::from_utf8_lossy(&key),
        "status": "unmatched",
        "value": value_json(event),
        "partners": partners.iter().map(Vec::len).collect::<Vec<_>>(),
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
    fn a_match_gives_one_record_with_every_topics_value_in_order() {
        let events = [
            event("orders", "order-1", Some(r#"{"amount": 20}"#), 1_764_680_400_000),
            event("payments", "order-1", Some(r#"{"method": "card"}"#), 1_764_680_405_000),
            event("shipments", "order-1", Some(r#"{"carrier": "post"}"#), 1_764_680_403_000),
        ];
        let out = matched(b"order-1".to_vec(), &events);
        assert_eq!(out.key.as_deref(), Some(&b"order-1"[..]));
        assert_eq!(
            body(&out),
            json!({"key": "order-1", "status": "matched",
                   "events": [{"amount": 20}, {"method": "card"}, {"carrier": "post"}],
                   "at": 1_764_680_405_000i64})
        );
    }

    #[test]
    fn an_event_left_without_a_match_is_reported_with_the_partners_it_found() {
        let order = event("orders", "order-3", Some(r#"{"amount": 5}"#), 1_764_680_420_000);
        let paid = vec![event("payments", "order-3", Some(r#"{"method": "cash"}"#), 0)];
        let out = unmatched(b"order-3".to_vec(), &order, &[paid, Vec::new()]);
        assert_eq!(
            body(&out),
            json!({"key": "order-3", "status": "unmatched", "value": {"amount": 5}, "partners": [1, 0]})
        );
    }

    #[test]
    fn a_value_that_is_not_json_is_passed_as_text_and_a_tombstone_as_null() {
        let none = [Vec::new(), Vec::new()];
        let text = event("orders", "p", Some("not json"), 0);
        assert_eq!(body(&unmatched(b"p".to_vec(), &text, &none))["value"], "not json");
        let tombstone = event("orders", "p", None, 0);
        assert_eq!(body(&unmatched(b"p".to_vec(), &tombstone, &none))["value"], Value::Null);
    }
}
