//! The "order shipped" action of a three-topic join, in Rust (world `plugin-n`). Topics, in
//! `join.topics` order: orders, payments, shipments.
//!
//! - match: one record `{"order_id", "status": "shipped", "order", "payment", "shipment",
//!   "shipped_at", "by"}`
//! - expired order (a `left` join): `{"order_id", "status", "order", "payments", "shipments",
//!   "by"}`, the status `unpaid` when no payment came in its window, else `not-shipped`; the
//!   two counts are the partners found per topic.
//!
//! Values that are JSON are embedded as JSON, anything else as a string. A match's record is
//! written as text around the values' own JSON, checked but not parsed into a tree: parsing three
//! values into `serde_json::Value`s and writing them out again was most of the plugin's time and
//! ~40 % of the host's CPU in `make bench-join-3` (perf, 200k records per topic).

wit_bindgen::generate!({ path: "../../../wit", world: "plugin-n" });

use cojoin::plugin::host::{log, Level};
use serde_json::value::RawValue;
use serde_json::{json, Value};

struct OrderShipped;

fn value_json(event: &Event) -> Value {
    match &event.value {
        None => Value::Null,
        Some(bytes) => serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())),
    }
}

fn record(key: Vec<u8>, body: Value) -> OutputRecord {
    OutputRecord {
        topic: None,
        key: Some(key),
        value: Some(body.to_string().into_bytes()),
        headers: Vec::new(),
    }
}

/// Appends the event's value as JSON: its own text when it is JSON (checked, not re-encoded),
/// else a string; `null` for a tombstone.
fn push_value(out: &mut String, event: &Event) {
    match &event.value {
        None => out.push_str("null"),
        Some(bytes) => match serde_json::from_slice::<&RawValue>(bytes) {
            Ok(raw) => out.push_str(raw.get()),
            Err(_) => out.push_str(&Value::String(String::from_utf8_lossy(bytes).into_owned()).to_string()),
        },
    }
}

fn on_match(key: Vec<u8>, events: Vec<Event>) -> Result<Vec<OutputRecord>, String> {
    let [order, payment, shipment] = <[Event; 3]>::try_from(events)
        .map_err(|e| format!("a three-topic join gives 3 events, not {}", e.len()))?;
    let id = Value::String(String::from_utf8_lossy(&key).into_owned()).to_string();
    let values = [&order, &payment, &shipment].map(|e| e.value.as_ref().map_or(4, Vec::len));
    let mut out = String::with_capacity(128 + id.len() + values.iter().sum::<usize>());
    out.push_str("{\"order_id\":");
    out.push_str(&id);
    out.push_str(",\"status\":\"shipped\",\"order\":");
    push_value(&mut out, &order);
    out.push_str(",\"payment\":");
    push_value(&mut out, &payment);
    out.push_str(",\"shipment\":");
    push_value(&mut out, &shipment);
    out.push_str(",\"shipped_at\":");
    out.push_str(&shipment.timestamp.to_string());
    out.push_str(",\"by\":\"rust\"}");
    Ok(vec![OutputRecord {
        topic: None,
        key: Some(key),
        value: Some(out.into_bytes()),
        headers: Vec::new(),
    }])
}

fn on_expire(key: Vec<u8>, order: Event, partners: Vec<Vec<Event>>) -> Result<Vec<OutputRecord>, String> {
    let count = |i: usize| partners.get(i).map_or(0, Vec::len);
    let status = if count(0) == 0 { "unpaid" } else { "not-shipped" };
    let body = json!({
        "order_id": String::from_utf8_lossy(&key),
        "status": status,
        "order": value_json(&order),
        "payments": count(0),
        "shipments": count(1),
        "by": "rust",
    });
    Ok(vec![record(key, body)])
}

impl Guest for OrderShipped {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        log(Level::Info, &format!("order-shipped (rust) ready, {} config entries", config.len()));
        Ok(())
    }

    fn on_match_n(key: Vec<u8>, events: Vec<Event>) -> Result<Vec<OutputRecord>, String> {
        on_match(key, events)
    }

    fn on_expire_n(key: Vec<u8>, event: Event, partners: Vec<Vec<Event>>) -> Result<Vec<OutputRecord>, String> {
        on_expire(key, event, partners)
    }

    fn on_batch_n(calls: Vec<CallN>) -> Vec<Outcome> {
        calls
            .into_iter()
            .map(|call| match call {
                CallN::OnMatchN(m) => on_match(m.key, m.events),
                CallN::OnExpireN(x) => on_expire(x.key, x.event, x.partners),
            })
            .collect()
    }
}

export!(OrderShipped);
