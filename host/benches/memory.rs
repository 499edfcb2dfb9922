//! Memory held by the join state per buffered event, measured with a counting allocator: the heap
//! bytes live while the state holds N events (all of it: events, their `Arc`s, the per-key map, the
//! expiry index, spare capacity), divided by N. Also prints what the state itself accounts
//! (`JoinState::held`, the figure `/metrics` exports as `cojoin_state_bytes`).
//!
//! Requested bytes, as the program asks for them. The state allocates in large blocks (its event
//! store's segments, its index and table), so the allocator's own overhead per block does not
//! matter here. The target (issue 5) is at most the value's size + 96 bytes per held event.
//! Run with `make bench-memory`.

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
    let window = JoinWindow {
        window_ms: i64::MAX / 4,
        grace_ms: 0,
    };
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
