//! A plugin of world `plugin-n` (joins of three topics or more): its calls, one by one and in a
//! batch, and the error either world's component gives for the other world's call.

use std::sync::Arc;

use cojoin::event::{Call, Side};
use cojoin::plugin::PluginLimits;
use serde_json::json;

use super::{body, event, registry};

#[test]
fn a_three_topic_plugin_gets_one_event_per_topic_and_the_partners_of_an_expiry() {
    for lang in ["rust", "python", "js"] {
        three_topic_calls(lang);
    }
}

/// The `order_shipped` example of `lang`: the same records, one by one and in a batch.
fn three_topic_calls(lang: &str) {
    let plugin = registry(
        &format!("order_shipped_{lang}.wasm"),
        PluginLimits::default(),
        &[],
    );
    assert!(plugin.current().is_n_way(), "{lang}");
    let mut worker = plugin.handle().unwrap();
    let events: Vec<_> = [("orders", 10), ("payments", 12), ("shipments", 15)]
        .map(|(topic, offset)| Arc::new(event(topic, "o-7", offset)))
        .into();
    let out = worker.on_match_n(b"o-7", &events).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key.as_deref(), Some(&b"o-7"[..]));
    let pad = "x".repeat(52);
    let value = json!({"id": "o-7", "amount": 42.5, "pad": pad});
    assert_eq!(
        body(&out[0]),
        json!({
            "order_id": "o-7", "status": "shipped", "order": value, "payment": value,
            "shipment": value, "shipped_at": events[2].timestamp, "by": lang,
        }),
        "{lang}"
    );
    // Paid twice, never shipped: the partners arrive per topic.
    let order = event("orders", "o-8", 20);
    let payments = vec![
        Arc::new(event("payments", "o-8", 21)),
        Arc::new(event("payments", "o-8", 22)),
    ];
    let partners = vec![payments, Vec::new()];
    let out = worker.on_expire_n(b"o-8", &order, &partners).unwrap();
    let got = body(&out[0]);
    assert_eq!(
        (&got["status"], &got["payments"], &got["shipments"]),
        (&json!("not-shipped"), &json!(2), &json!(0)),
        "{lang}"
    );
    let unpaid = worker
        .on_expire_n(
            b"o-9",
            &event("orders", "o-9", 30),
            &[Vec::new(), Vec::new()],
        )
        .unwrap();
    assert_eq!(body(&unpaid[0])["status"], "unpaid", "{lang}");

    // A batch: what the calls one by one gave, in order; a wrong event count is that call's
    // error only.
    let short = &events[..2];
    let calls = [
        Call::MatchN {
            key: b"o-7",
            events: &events,
        },
        Call::MatchN {
            key: b"o-7",
            events: short,
        },
        Call::ExpireN {
            key: b"o-8",
            event: &order,
            partners: &partners,
        },
    ];
    let results = worker.on_batch(&calls).expect("plugin-n batches").unwrap();
    assert_eq!(results.len(), 3, "{lang}");
    let status = |i: usize| body(&results[i].as_ref().unwrap()[0])["status"].clone();
    assert_eq!(status(0), "shipped", "{lang}");
    assert_eq!(
        results[1].as_ref().unwrap_err(),
        "a three-topic join gives 3 events, not 2",
        "{lang}"
    );
    assert_eq!(status(2), "not-shipped", "{lang}");
}

#[test]
fn each_world_refuses_the_other_worlds_calls_naming_the_world_it_needs() {
    let mut n_way = registry("order_shipped_rust.wasm", PluginLimits::default(), &[])
        .handle()
        .unwrap();
    let (a, b) = (event("orders", "k", 1), event("payments", "k", 2));
    let e = n_way.on_match(b"k", &a, &b).unwrap_err().to_string();
    assert!(
        e.contains("world plugin-n") && e.contains("no on-match"),
        "{e}"
    );
    let e = n_way
        .on_expire(b"k", &a, Side::LEFT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no on-expire"), "{e}");

    let mut pair = registry("order_paid_rust.wasm", PluginLimits::default(), &[])
        .handle()
        .unwrap();
    assert!(!pair.version().is_n_way());
    let e = pair
        .on_match_n(
            b"k",
            &[Arc::new(a.clone()), Arc::new(b.clone()), Arc::new(b)],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("world plugin ") && e.contains("plugin-n"), "{e}");
    // The refusal costs the instance nothing: the two-topic call still works after it.
    assert_eq!(pair.on_expire(b"k", &a, Side::LEFT).unwrap().len(), 1);
}
