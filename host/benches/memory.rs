//! Memory held by the join state per buffered event, measured with a counting allocator: the heap
//! bytes live while the state holds N events (all of it: events, their `Arc`s, the per-key map, the
//! expiry index, spare capacity), divided by N. Also prints what the state itself accounts
//! (`JoinState::held`, the figure `/metrics` exports as `cojoin_state_bytes`).
//!
//! Requested bytes, as the program asks for them: glibc adds 8 to 16 bytes per allocation on top
//! (three allocations per held event: the `Arc<Event>`, the key, the value).
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

/// Events held at the end of a run: the window holds all of them.
const HELD: i64 = 100_000;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("join state memory, {HELD} events held (half left, half right), 12-byte keys");
    println!("| values | keys per event | heap bytes per held event | over key + value | accounted by held() |");
    println!("|---|---:|---:|---:|---:|");
    for value_bytes in [100usize, 1_000] {
        for (label, share) in [("unique keys", false), ("left and right share a key", true)] {
            let (heap, accounted) = measure(value_bytes, share);
            let payload = 12 + value_bytes;
            println!(
                "| {value_bytes} B, {label} | {} | {heap:.0} | {:.0} | {accounted:.0} |",
                if share { "0.5" } else { "1" },
                heap - payload as f64,
            );
        }
    }
}

/// (heap bytes per held event, bytes per held event as `held()` accounts them).
fn measure(value_bytes: usize, share_keys: bool) -> (f64, f64) {
    let window = JoinWindow {
        window_ms: i64::MAX / 4,
        grace_ms: 0,
    };
    let mut out = Vec::with_capacity(16);
    // Shared by every event of a topic, as `cojoin run` does.
    let topics: [std::sync::Arc<str>; 2] = ["orders".into(), "payments".into()];
    let before = LIVE.load(Relaxed);
    let mut state = JoinState::new(window, JoinKind::Inner);
    for i in 0..HELD {
        // Built as the consumer builds them (`worker::run::event_of`): exact-size payloads.
        let side = if i % 2 == 0 { Side::Left } else { Side::Right };
        let k = if share_keys { i / 2 } else { i };
        let e = Event {
            topic: topics[side as usize].clone(),
            partition: 0,
            offset: i,
            timestamp: 1_700_000_000_000 + i,
            key: format!("k-{k:010}").as_bytes().to_vec().into(),
            value: Some(vec![b'x'; value_bytes].into()),
            headers: Default::default(),
        };
        state.insert(side, e, &mut out);
        out.clear();
    }
    let heap = (LIVE.load(Relaxed) - before) as f64 / HELD as f64;
    let (held, bytes) = state.held();
    assert_eq!(held as i64, HELD, "the window holds every event");
    (heap, bytes as f64 / held as f64)
}
