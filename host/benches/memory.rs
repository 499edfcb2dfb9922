//! Memory held by the join state per buffered event, measured with a counting allocator: the heap
//! bytes live while the state holds N events (all of it: events, their `Arc`s, the per-key map, the
//! expiry index, spare capacity), divided by N. Also prints what the state itself accounts
//! (`JoinState::held`, the figure `/metrics` exports as `cojoin_state_bytes`).
//!
//! Requested bytes, as the program asks for them. The state allocates in large blocks (its event
//! store's segments, its index and table), so the allocator's own overhead per block does not
//! matter here. The target (issue 5) is at most the value's size + 96 bytes per held event.
//!
//! A second table (issue 32) weighs one three-way join against the two chained joins it replaces,
//! per key whose order, payment and shipment are all held: the three-way state holds the three
//! events; the chain holds the order and the payment in its first join, and in its second the
//! first join's output (the order-paid record, carrying both values) and the shipment. Heap bytes
//! and `held()` bytes per key, the two joins' states summed. The target: the three-way join's at
//! most the chain's.
//!
//! Run with `make bench-matcher` (after the matcher's own benchmark) or
//! `cargo bench -p cojoin --bench memory`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

use cojoin::event::{Event, Side};
use cojoin::join::{JoinKind, JoinState, JoinWindow};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Events held at the end of a run: the window holds all of them. Two counts, because the
/// per-key table grows in powers of two: at 60,000 keys it has just grown (most spare room), at
/// 100,000 it is fuller.
const HELD: [i64; 2] = [60_000, 100_000];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("join state memory, as many events of each topic held, 12-byte keys");
    println!("| topics | events held | values | keys per event | heap bytes per held event | over the value (target ≤ 96) | over key + value | accounted by held() |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|");
    // Two topics, then three: an N-way join holds its events in the same store.
    for (topics, held) in HELD.map(|h| (2, h)).into_iter().chain([(3, HELD[1])]) {
        for value_bytes in [100usize, 1_000] {
            for (label, share, shuffle) in [
                ("unique keys", false, false),
                ("the topics share a key", true, false),
                (
                    "unique keys, every other event 1 s out of order",
                    false,
                    true,
                ),
            ] {
                let (heap, accounted) = measure(held, value_bytes, topics, share, shuffle);
                println!(
                    "| {topics} | {held} | {value_bytes} B, {label} | {} | {heap:.0} | {:.0} | {:.0} | {accounted:.0} |",
                    if share { format!("1/{topics}") } else { "1".into() },
                    heap - value_bytes as f64,
                    heap - (12 + value_bytes) as f64,
                );
            }
        }
    }
    println!();
    println!("three topics, per key with its order, payment and shipment held: one three-way join against two chained joins, 12-byte keys");
    println!("| keys held | values | three-way: heap bytes per key | chained: heap bytes per key | three-way / chained | three-way: held() per key | chained: held() per key |");
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for keys in HELD.map(|h| h / 3) {
        for value_bytes in [100usize, 1_000] {
            let (three_heap, three_held) = per_key_three_way(keys, value_bytes);
            let (chain_heap, chain_held) = per_key_chained(keys, value_bytes);
            println!(
                "| {keys} | {value_bytes} B | {three_heap:.0} | {chain_heap:.0} | {:.2} | {three_held:.0} | {chain_held:.0} |",
                three_heap / chain_heap
            );
        }
    }
}

/// Everything held until the run ends: no event leaves the state during a measurement.
const HOLD_ALL: JoinWindow = JoinWindow {
    window_ms: i64::MAX / 4,
    grace_ms: 0,
};

/// An event as the consumer builds it (`kafka::source::event_of`): exact-size payloads, the topic
/// name shared.
fn event(topic: &std::sync::Arc<str>, offset: i64, key: &[u8], value: Vec<u8>) -> Event {
    Event {
        topic: topic.clone(),
        partition: 0,
        offset,
        timestamp: 1_700_000_000_000 + offset,
        key: Some(key.to_vec().into()),
        value: Some(value.into()),
        headers: Default::default(),
    }
}

/// (heap bytes, `held()` bytes) per key of a three-way join holding `keys` keys, each with one
/// order, payment and shipment of `value_bytes`.
fn per_key_three_way(keys: i64, value_bytes: usize) -> (f64, f64) {
    let names: [std::sync::Arc<str>; 3] = ["orders".into(), "payments".into(), "shipments".into()];
    let mut out = Vec::with_capacity(16);
    let before = LIVE.load(Relaxed);
    let mut state = JoinState::with_topics(3, HOLD_ALL, JoinKind::Inner);
    for i in 0..keys {
        let key = format!("k-{i:010}");
        for (t, name) in names.iter().enumerate() {
            let e = event(name, i, key.as_bytes(), vec![b'x'; value_bytes]);
            state.insert(Side::of(t), e, &mut out);
        }
        assert_eq!(out.len(), 1, "every key makes one match");
        out.clear();
    }
    let heap = (LIVE.load(Relaxed) - before) as f64 / keys as f64;
    let (held, bytes) = state.held();
    assert_eq!(held as i64, 3 * keys, "the window holds every event");
    (heap, bytes as f64 / keys as f64)
}

/// The same keys through two chained joins: orders with payments, whose match becomes the
/// order-paid record that the second join reads (from an intermediate topic) with the shipments.
/// The record is the Rust order-paid plugin's (plugins/rust/order-paid) with JSON values
/// embedded as they are: both values and 99 bytes around them (with 12-byte keys).
fn per_key_chained(keys: i64, value_bytes: usize) -> (f64, f64) {
    let names: [std::sync::Arc<str>; 4] = [
        "orders".into(),
        "payments".into(),
        "orders-paid".into(),
        "shipments".into(),
    ];
    let mut out = Vec::with_capacity(16);
    let before = LIVE.load(Relaxed);
    let mut paid = JoinState::new(HOLD_ALL, JoinKind::Inner);
    let mut shipped = JoinState::new(HOLD_ALL, JoinKind::Inner);
    for i in 0..keys {
        let key = format!("k-{i:010}");
        let value = || vec![b'x'; value_bytes];
        paid.insert(
            Side::LEFT,
            event(&names[0], i, key.as_bytes(), value()),
            &mut out,
        );
        paid.insert(
            Side::RIGHT,
            event(&names[1], i, key.as_bytes(), value()),
            &mut out,
        );
        assert_eq!(out.len(), 1, "every order is paid");
        out.clear();
        let record = [
            format!(r#"{{"order_id":"{key}","status":"paid","order":"#).into_bytes(),
            value(),
            br#","payment":"#.to_vec(),
            value(),
            format!(r#","paid_at":{},"by":"rust"}}"#, 1_700_000_000_000 + i).into_bytes(),
        ]
        .concat();
        shipped.insert(
            Side::LEFT,
            event(&names[2], i, key.as_bytes(), record),
            &mut out,
        );
        shipped.insert(
            Side::RIGHT,
            event(&names[3], i, key.as_bytes(), value()),
            &mut out,
        );
        assert_eq!(out.len(), 1, "every paid order is shipped");
        out.clear();
    }
    let heap = (LIVE.load(Relaxed) - before) as f64 / keys as f64;
    let (held, bytes) = [paid.held(), shipped.held()]
        .into_iter()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(held as i64, 4 * keys, "the windows hold every event");
    (heap, bytes as f64 / keys as f64)
}

/// (heap bytes per held event, bytes per held event as `held()` accounts them), the events
/// taken from `topics` topics in turn. `shuffle`: every other event is a second older than the
/// one before it, so half the events arrive out of close-time order and take an expiry-heap
/// entry (join/state.rs).
fn measure(
    held_events: i64,
    value_bytes: usize,
    topics: usize,
    share_keys: bool,
    shuffle: bool,
) -> (f64, f64) {
    let window = HOLD_ALL;
    let mut out = Vec::with_capacity(16);
    // Shared by every event of a topic, as `cojoin run` does.
    let names: [std::sync::Arc<str>; 3] = ["orders".into(), "payments".into(), "shipments".into()];
    let before = LIVE.load(Relaxed);
    let mut state = JoinState::with_topics(topics, window, JoinKind::Inner);
    for i in 0..held_events {
        // Built as the consumer builds them (`kafka::source::event_of`): exact-size payloads.
        let side = Side::of(i as usize % topics);
        let k = if share_keys { i / topics as i64 } else { i };
        let e = Event {
            topic: names[side.index()].clone(),
            partition: 0,
            offset: i,
            timestamp: 1_700_000_000_000 + i - if shuffle && i % 2 == 1 { 1_000 } else { 0 },
            key: Some(format!("k-{k:010}").as_bytes().to_vec().into()),
            value: Some(vec![b'x'; value_bytes].into()),
            headers: Default::default(),
        };
        state.insert(side, e, &mut out);
        out.clear();
    }
    let heap = (LIVE.load(Relaxed) - before) as f64 / held_events as f64;
    let (held, bytes) = state.held();
    assert_eq!(held as i64, held_events, "the window holds every event");
    (heap, bytes as f64 / held as f64)
}
