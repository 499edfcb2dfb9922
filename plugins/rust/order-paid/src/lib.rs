//! The "order paid" action, in Rust. Left topic: orders; right topic: payments.
//!
//! - match: one record `{"order_id", "status": "paid", "order", "payment", "paid_at", "by"}`
//! - expired order: `{"order_id", "status": "unpaid", "order", "by"}`
//! - expired payment: `{"order_id", "status": "payment-without-order", "payment", "by"}`
//!
//! Values that are JSON are embedded as JSON, anything else as a string. The Python and JavaScript
//! versions in `plugins/python` and `plugins/js` produce the same records (with their own `by`).

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use cojoin::plugin::host::{log, Level};
use serde_json::{json, Value};

struct OrderPaid;

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

impl Guest for OrderPaid {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        log(Level::Info, &format!("order-paid (rust) ready, {} config entries", config.len()));
        Ok(())
    }

    fn on_match(key: Vec<u8>, a: Event, b: Event) -> Result<Vec<OutputRecord>, String> {
        let body = json!({
            "order_id": String::from_utf8_lossy(&key),
            "status": "paid",
            "order": value_json(&a),
            "payment": value_json(&b),
            "paid_at": b.timestamp,
            "by": "rust",
        });
        Ok(vec![record(key, body)])
    }

    fn on_expire(key: Vec<u8>, event: Event, side: Side) -> Result<Vec<OutputRecord>, String> {
        let id = String::from_utf8_lossy(&key).into_owned();
        let body = match side {
            Side::Left => json!({
                "order_id": id, "status": "unpaid", "order": value_json(&event), "by": "rust",
            }),
            Side::Right => json!({
                "order_id": id, "status": "payment-without-order", "payment": value_json(&event),
                "by": "rust",
            }),
        };
        Ok(vec![record(key, body)])
    }
}

export!(OrderPaid);
