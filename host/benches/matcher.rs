//! Join core benchmark: the cost per event of `JoinState::insert` (probe the other side, hold the
//! event, expire what stream time passed) and of `TaskQueue` ordering (timed with a clone of each
//! event, which the consumer side does not pay), with 100-byte and 1 KB
//! values, and the bytes the state accounts per held event. No Kafka, no plugin: the pure core.
//! Prints the median of 5 runs of each case; run with `make bench-matcher`.

use std::time::{Duration, Instant};

use cojoin::event::{Event, Side};
use cojoin::join::{JoinKind, JoinOutcome, JoinState, JoinWindow, TaskQueue};

const EVENTS: i64 = 200_000;

fn event(topic: &str, key: u64, offset: i64, ts: i64, value_bytes: usize) -> Event {
    Event {
        topic: topic.into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: format!("k-{key}").into_bytes(),
        value: Some(vec![b'x'; value_bytes]),
        headers: vec![],
    }
}

/// Left event i at 10 ms steps; right event i 5 ms later for even i (a match), a key of its own
/// for odd i (no partner). The window holds 100 events per side.
fn stream(value_bytes: usize) -> Vec<(Side, Event)> {
    let mut out = Vec::with_capacity(2 * EVENTS as usize);
    for i in 0..EVENTS {
        let ts = 1_700_000_000_000 + i * 10;
        out.push((Side::Left, event("left", i as u64, i, ts, value_bytes)));
        let key = if i % 2 == 0 {
            i as u64
        } else {
            1 << 40 | i as u64
        };
        out.push((Side::Right, event("right", key, i, ts + 5, value_bytes)));
    }
    out
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Inserts the whole stream into a fresh state; (time, matches, expiries, bytes per held event).
fn run_state(events: Vec<(Side, Event)>, kind: JoinKind) -> (Duration, usize, usize, f64) {
    let window = JoinWindow {
        window_ms: 1_000,
        grace_ms: 0,
    };
    let mut state = JoinState::new(window, kind);
    let mut out = Vec::new();
    let (mut matches, mut expiries) = (0, 0);
    let started = Instant::now();
    for (side, e) in events {
        state.insert(side, e, &mut out);
        for o in out.drain(..) {
            match o {
                JoinOutcome::Match { .. } => matches += 1,
                JoinOutcome::Expired { .. } => expiries += 1,
                JoinOutcome::Late { .. } => {}
            }
        }
    }
    let took = started.elapsed();
    let (held, bytes) = state.held();
    (took, matches, expiries, bytes as f64 / held.max(1) as f64)
}

fn run_queue(events: Vec<(Side, Event)>) -> Duration {
    let mut queue = TaskQueue::new(0);
    queue.set_replay(Side::Left, 0, None);
    queue.set_replay(Side::Right, 0, None);
    let started = Instant::now();
    // Pushed in chunks as a consumer round would, then drained in timestamp order.
    for chunk in events.chunks(1_000) {
        for (side, e) in chunk {
            queue.push(*side, e.clone());
        }
        while queue.next(0).is_some() {}
    }
    started.elapsed()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("join core, {EVENTS} + {EVENTS} events, window 1 s (100 events per side held), median of 5 runs");
    println!(
        "{:<34} {:>12} {:>10} {:>10} {:>16}",
        "case", "ns/event", "matches", "expiries", "bytes/held event"
    );
    for value_bytes in [100, 1_000] {
        for (name, kind) in [("inner", JoinKind::Inner), ("left", JoinKind::Left)] {
            let mut times = Vec::new();
            let mut last = (0, 0, 0.0);
            for _ in 0..5 {
                let (t, m, x, b) = run_state(stream(value_bytes), kind);
                times.push(t);
                last = (m, x, b);
            }
            let per = median(times).as_nanos() as f64 / (2 * EVENTS) as f64;
            println!(
                "{:<34} {per:>12.0} {:>10} {:>10} {:>16.0}",
                format!("JoinState::insert, {name}, {value_bytes} B"),
                last.0,
                last.1,
                last.2
            );
        }
        let times: Vec<Duration> = (0..5).map(|_| run_queue(stream(value_bytes))).collect();
        let per = median(times).as_nanos() as f64 / (2 * EVENTS) as f64;
        println!(
            "{:<34} {per:>12.0}",
            format!("TaskQueue push+next+clone, {value_bytes} B")
        );
    }
}
