//! Shared by the host's test binaries and benchmarks (included with `#[path]`).

mod plugin_path;
pub use plugin_path::plugin_path;

/// An event whose value is exactly 100 bytes of JSON, as the plugin benchmarks call with.
#[allow(dead_code)] // Used by the benchmarks, not by every test binary that includes this module.
pub fn event_100b(topic: &str, key: &str) -> cojoin::event::Event {
    let head = format!("{{\"id\":\"{key}\",\"amount\":42.5,\"pad\":\"");
    let pad = "x".repeat(100 - head.len() - 2);
    let value = format!("{head}{pad}\"}}");
    assert_eq!(value.len(), 100);
    cojoin::event::Event {
        topic: topic.into(),
        partition: 0,
        offset: 12345,
        timestamp: 1_764_680_400_000,
        key: Some(key.as_bytes().into()),
        value: Some(value.into_bytes().into()),
        headers: Box::default(),
    }
}

/// The plugins the benchmarks measure, with their labels: a no-op and order-paid per language.
#[allow(dead_code)] // Used by the benchmarks, not by every test binary that includes this module.
pub const BENCH_PLUGINS: [(&str, &str); 6] = [
    ("rust no-op", "noop.wasm"),
    ("rust order-paid", "order_paid_rust.wasm"),
    ("python no-op", "noop_python.wasm"),
    ("python order-paid", "order_paid_python.wasm"),
    ("js no-op", "noop_js.wasm"),
    ("js order-paid", "order_paid_js.wasm"),
];
