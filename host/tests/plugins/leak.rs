//! Memory of a long-lived instance. componentize-py 0.25 leaks what a call returns (about the size
//! of the returned records, every call), so the order-paid Python instance reached its cap after
//! ~1M calls and trapped as `memory` on an innocent call. An instance is now replaced before that.

use std::time::Instant;

use cojoin::event::Event;
use cojoin::plugin::PluginLimits;

use super::registry;

fn event_with(topic: &str, key: &str, offset: i64, value_len: usize) -> Event {
    let value = format!("{{\"id\":\"{key}\",\"pad\":\"{}\"}}", "x".repeat(value_len));
    Event {
        topic: topic.into(),
        partition: 3,
        offset,
        timestamp: 1_764_680_400_000 + offset,
        key: Some(key.as_bytes().to_vec().into()),
        value: Some(value.into_bytes().into()),
        headers: Box::default(),
    }
}

#[test]
fn a_leaking_python_instance_is_recycled_before_its_cap_and_no_call_fails() {
    let cap = 32 << 20;
    let limits = PluginLimits {
        memory_bytes: cap,
        deadline: std::time::Duration::from_secs(5),
        ..PluginLimits::default()
    };
    let mut worker = registry("order_paid_python.wasm", limits, &[])
        .handle()
        .unwrap();
    let start = worker.memory_bytes();
    // 1 KB values: each call returns ~2 KB, leaked; 20,000 calls leak ~40 MB, past the cap.
    let (calls, mut peak, mut recycle_calls) = (20_000, 0, Vec::new());
    let started = Instant::now();
    for i in 0..calls {
        let key = format!("k{i}");
        let (a, b) = (
            event_with("orders", &key, i, 1000),
            event_with("payments", &key, i, 1000),
        );
        let (recycles, call_started) = (worker.recycles(), Instant::now());
        let out = worker
            .on_match(key.as_bytes(), &a, &b)
            .unwrap_or_else(|e| panic!("call {i} failed: {e}"));
        if worker.recycles() > recycles {
            recycle_calls.push(call_started.elapsed());
        }
        assert_eq!(out.len(), 1);
        peak = peak.max(worker.memory_bytes());
    }
    let took = started.elapsed();
    assert!(worker.recycles() >= 1, "never recycled; peak {peak}");
    assert!(peak <= cap, "peak {peak} over the cap {cap}");
    assert_eq!(worker.restarts(), 0, "no call trapped");
    eprintln!(
        "{calls} calls in {took:?}: instance started at {start} bytes, peaked at {peak}, recycled {} times; the calls that recycled took {recycle_calls:?}",
        worker.recycles()
    );
}
