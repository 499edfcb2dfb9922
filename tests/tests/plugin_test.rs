//! `cojoin plugin test`: a recorded stream through the real matcher and plugin, without Kafka.

use cojoin_e2e::{cojoin, plugin, root};
use serde_json::Value;

fn run(wasm: &str, events: &str) -> (Vec<Value>, String, Option<i32>) {
    run_with(
        &root().join("examples/orders-payments/cojoin.toml"),
        wasm,
        events,
    )
}

/// `cojoin plugin test` of `wasm` (from build/plugins) with `config` on the recording `events`:
/// the output lines, stderr and the exit code.
fn run_with(
    config: &std::path::Path,
    wasm: &str,
    events: &str,
) -> (Vec<Value>, String, Option<i32>) {
    let wasm = plugin(wasm);
    let out = cojoin(&[
        "plugin",
        "test",
        wasm.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--events",
        events,
    ]);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

fn body(line: &Value) -> Value {
    serde_json::from_str(line["value"].as_str().unwrap()).unwrap()
}

#[test]
fn the_example_stream_gives_paid_and_unpaid_orders_and_dead_letters_the_keyless_one() {
    let events = root().join("examples/orders-payments/events.jsonl");
    for lang in ["rust", "python"] {
        let (lines, stderr, code) =
            run(&format!("order_paid_{lang}.wasm"), events.to_str().unwrap());
        assert_eq!(code, Some(0), "{stderr}");
        let mut outcomes: Vec<(String, String)> = lines
            .iter()
            .filter(|l| l.get("dead_letter").is_none())
            .map(|l| {
                assert_eq!(l["topic"], "orders-paid");
                let b = body(l);
                (
                    b["order_id"].as_str().unwrap().to_owned(),
                    b["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        outcomes.sort();
        assert_eq!(
            outcomes,
            [
                ("order-1".into(), "paid".into()),
                ("order-2".into(), "unpaid".into()),
                ("order-3".into(), "paid".into())
            ],
            "{lang}"
        );
        let dead: Vec<_> = lines
            .iter()
            .filter(|l| l.get("dead_letter").is_some())
            .collect();
        assert_eq!(dead.len(), 1, "{lang}: {dead:?}");
        assert_eq!(dead[0]["dead_letter"], "null-key");
        assert_eq!(dead[0]["topic"], "orders-payments-dlq");
        assert_eq!(dead[0]["inputs"][0]["offset"], 2);
        assert!(
            stderr.contains("records 7, matches 2, expiries 1"),
            "{stderr}"
        );
    }
}

#[test]
fn inputs_of_a_trapping_plugin_are_dead_lettered_with_the_error_and_the_rest_produced() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let mut text = String::new();
    for (i, key) in ["ok-1", "panic-1", "ok-2", "error-1"].iter().enumerate() {
        let ts = 1_764_680_400_000i64 + i as i64 * 1000;
        text += &format!("{{\"topic\":\"orders\",\"offset\":{i},\"timestamp\":{ts},\"key\":\"{key}\",\"value\":\"o\"}}\n");
        text += &format!("{{\"topic\":\"payments\",\"offset\":{i},\"timestamp\":{ts},\"key\":\"{key}\",\"value\":\"p\"}}\n");
    }
    std::fs::write(&events, text).unwrap();
    let (lines, stderr, code) = run("misbehave.wasm", events.to_str().unwrap());
    assert_eq!(code, Some(0), "{stderr}");
    let produced: Vec<_> = lines.iter().filter_map(|l| l["value"].as_str()).collect();
    assert_eq!(produced, ["ok ok-1", "ok ok-2"]);
    let dead: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l.get("dead_letter").is_some())
        .map(|l| {
            (
                l["dead_letter"].as_str().unwrap().to_owned(),
                l["error"]["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(dead.len(), 2, "{lines:?}");
    assert_eq!(dead[0].0, "crash");
    assert_eq!(
        dead[1],
        (
            "plugin-error".to_owned(),
            "fixture error for key error-1".to_owned()
        )
    );
    // Retried twice after the first failure (plugin.retries = 2): 3 failed calls per bad pair.
    assert!(
        stderr.contains("failed calls 6, refused outputs 0, dead-lettered 4"),
        "{stderr}"
    );
}

#[test]
fn a_join_on_a_field_of_the_value_re_keys_the_recorded_side() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("examples/orders-payments/cojoin.toml"))
        .unwrap()
        .replace("right_key = \"record-key\"", "right_key = \"/order_id\"");
    let config = dir.path().join("cojoin.toml");
    std::fs::write(&config, text).unwrap();
    // Payments keyed by their own id, the order in the value; one lacks it.
    let events = dir.path().join("events.jsonl");
    std::fs::write(
        &events,
        [
            r#"{"topic": "orders", "partition": 0, "offset": 0, "timestamp": 1764680400000, "key": "order-1", "value": {"amount": 20}}"#,
            r#"{"topic": "payments", "partition": 3, "offset": 0, "timestamp": 1764680402000, "key": "pay-7", "value": {"order_id": "order-1"}}"#,
            r#"{"topic": "payments", "partition": 1, "offset": 0, "timestamp": 1764680403000, "key": "pay-8", "value": {"method": "card"}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let out = cojoin(&[
        "plugin",
        "test",
        plugin("order_paid_rust.wasm").to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let paid: Vec<_> = lines
        .iter()
        .filter(|l| l.get("dead_letter").is_none())
        .map(|l| body(l)["order_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paid, ["order-1"], "{lines:?}");
    let dead: Vec<_> = lines
        .iter()
        .filter(|l| l.get("dead_letter").is_some())
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["dead_letter"], "null-key");
    assert_eq!(dead[0]["inputs"][0]["partition"], 1);
}

/// `plugin test` with the three-topic example (`join.topics`) and its `plugin-n` plugin.
fn run_three(wasm: &str) -> (Vec<Value>, String, Option<i32>) {
    let dir = root().join("examples/orders-payments-shipments");
    let events = dir.join("events.jsonl");
    run_with(&dir.join("cojoin.toml"), wasm, events.to_str().unwrap())
}

#[test]
fn the_three_topic_example_ships_matched_orders_and_reports_the_rest_with_their_partners() {
    for lang in ["rust", "python", "js"] {
        three_topic_example(lang);
    }
}

fn three_topic_example(lang: &str) {
    let (lines, stderr, code) = run_three(&format!("order_shipped_{lang}.wasm"));
    assert_eq!(code, Some(0), "{lang}: {stderr}");
    let mut got: Vec<String> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["topic"], "orders-shipped", "{l}");
            let b = body(l);
            let id = b["order_id"].as_str().unwrap();
            match b["status"].as_str().unwrap() {
                "shipped" => format!("{id} shipped by {}", b["payment"]["method"]),
                status => format!("{id} {status} {}/{}", b["payments"], b["shipments"]),
            }
        })
        .collect();
    got.sort();
    // Order 4 was paid twice: one match per combination. Order 5's shipment came 16 s after it,
    // outside the 10 s window. Order 9 is still in its window when the recording ends.
    assert_eq!(
        got,
        [
            "order-1 shipped by \"card\"",
            "order-2 not-shipped 1/0",
            "order-3 unpaid 0/1",
            "order-4 shipped by \"card\"",
            "order-4 shipped by \"voucher\"",
            "order-5 not-shipped 1/0",
        ],
        "{lang}"
    );
    assert!(
        stderr.contains("records 15, matches 3, expiries 3"),
        "{lang}: {stderr}"
    );
}

#[test]
fn a_two_topic_plugin_for_three_topics_is_refused_naming_the_world_it_needs() {
    let (lines, stderr, code) = run_three("order_paid_rust.wasm");
    assert_ne!(code, Some(0));
    assert!(lines.is_empty());
    assert!(
        stderr.contains("a join of 3 topics takes a plugin of world `plugin-n`"),
        "{stderr}"
    );
}

/// The stream–table join of examples/orders-customers (README "Stream–table joins"): each order
/// with its customer's row as of its timestamp (versioned), or as the table stands when it is
/// taken (latest, and a global table); without a row, `no-customer` in a left join and nothing
/// in an inner one.
#[test]
fn the_orders_customers_recording_gives_the_readmes_table_in_each_mode() {
    let example = root().join("examples/orders-customers/cojoin.toml");
    let events = root().join("examples/orders-customers/events.jsonl");
    let text = std::fs::read_to_string(&example).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let variant = |name: &str, from: &str, to: &str| {
        assert!(text.contains(from), "{example:?} no longer says {from}");
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text.replace(from, to)).unwrap();
        path
    };
    let latest = variant("latest", "mode = \"versioned\"", "mode = \"latest\"");
    let inner = variant("inner", "kind = \"left\"", "kind = \"inner\"");
    // A global table's rows are the latest; the recording is replayed in one task.
    let global = variant(
        "global",
        "mode = \"versioned\", history = \"1h\"",
        "scope = \"global\"",
    );
    // (order, status, the customer's tier, the update's seconds after the first)
    let versioned_left = [
        ("order-1", "enriched", "silver", 0),
        ("order-2", "enriched", "gold", 0),
        ("order-3", "enriched", "gold", 60),
        ("order-4", "no-customer", "", 0),
        ("order-5", "no-customer", "", 0),
        ("order-6", "enriched", "silver", 0),
        ("order-7", "no-customer", "", 0),
    ];
    let mut latest_left = versioned_left;
    latest_left[5] = ("order-6", "enriched", "gold", 60);
    let versioned_inner: Vec<_> = (versioned_left.iter())
        .filter(|o| o.1 == "enriched")
        .copied()
        .collect();
    for (config, want) in [
        (&example, versioned_left.to_vec()),
        (&latest, latest_left.to_vec()),
        (&global, latest_left.to_vec()),
        (&inner, versioned_inner),
    ] {
        let (lines, stderr, code) = run_with(
            config,
            "order_enriched_python.wasm",
            events.to_str().unwrap(),
        );
        assert_eq!(code, Some(0), "{config:?}: {stderr}");
        let got: Vec<(String, String, String, i64)> = lines
            .iter()
            .map(|l| {
                let b = body(l);
                assert_eq!(l["key"], b["order_id"], "keyed by the order id: {l}");
                assert_eq!(b["order"]["customer_id"], b["customer_id"], "{b}");
                let since = b["customer_version_ts"]
                    .as_i64()
                    .map_or(0, |ts| (ts - 1_764_680_400_000) / 1000);
                (
                    b["order_id"].as_str().unwrap().to_owned(),
                    b["status"].as_str().unwrap().to_owned(),
                    b["customer"]["tier"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    since,
                )
            })
            .collect();
        let want: Vec<(String, String, String, i64)> = (want.iter())
            .map(|&(o, s, t, at)| (o.into(), s.into(), t.into(), at))
            .collect();
        assert_eq!(got, want, "{config:?}");
    }
}
