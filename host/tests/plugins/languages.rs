//! The example plugin behaves the same in Rust, Python and JavaScript.

use cojoin::event::Side;
use cojoin::plugin::PluginLimits;
use serde_json::json;

use super::{body, event, registry};

const LANGUAGES: [&str; 3] = ["rust", "python", "js"];

#[test]
fn order_paid_produces_the_same_records_in_every_language() {
    for lang in LANGUAGES {
        let mut worker = registry(
            &format!("order_paid_{lang}.wasm"),
            PluginLimits::default(),
            &[],
        )
        .handle()
        .unwrap();
        let (order, payment) = (event("orders", "o-7", 10), event("payments", "o-7", 12));
        let out = worker.on_match(b"o-7", &order, &payment).unwrap();
        assert_eq!(out.len(), 1, "{lang}");
        assert_eq!(out[0].topic, None, "{lang}: default output topic");
        assert_eq!(out[0].key.as_deref(), Some(&b"o-7"[..]), "{lang}");
        let pad = "x".repeat(52);
        assert_eq!(
            body(&out[0]),
            json!({
                "order_id": "o-7", "status": "paid",
                "order": {"id": "o-7", "amount": 42.5, "pad": pad},
                "payment": {"id": "o-7", "amount": 42.5, "pad": pad},
                "paid_at": payment.timestamp, "by": lang,
            }),
            "{lang}"
        );

        let unpaid = worker
            .on_expire(b"o-8", &event("orders", "o-8", 11), Side::LEFT)
            .unwrap();
        assert_eq!(body(&unpaid[0])["status"], "unpaid", "{lang}");
        assert_eq!(body(&unpaid[0])["order"]["id"], "o-8", "{lang}");
        let orphan = worker
            .on_expire(b"o-9", &event("payments", "o-9", 13), Side::RIGHT)
            .unwrap();
        assert_eq!(
            body(&orphan[0])["status"],
            "payment-without-order",
            "{lang}"
        );
    }
}

#[test]
fn non_json_values_and_tombstones_reach_the_plugin_intact() {
    for lang in LANGUAGES {
        let mut worker = registry(
            &format!("order_paid_{lang}.wasm"),
            PluginLimits::default(),
            &[],
        )
        .handle()
        .unwrap();
        let mut order = event("orders", "o-1", 1);
        order.value = Some(b"plain text".to_vec().into());
        let mut payment = event("payments", "o-1", 2);
        payment.value = None;
        let out = worker.on_match(b"o-1", &order, &payment).unwrap();
        assert_eq!(body(&out[0])["order"], "plain text", "{lang}");
        assert_eq!(body(&out[0])["payment"], serde_json::Value::Null, "{lang}");
    }
}
