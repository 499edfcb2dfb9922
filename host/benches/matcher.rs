//! Join core micro-benchmarks (criterion): the cost per event of `JoinState::insert` when it only
//! holds, when it probes and matches, and in a steady state where every insert expires an event;
//! and of `TaskQueue` ordering. No Kafka, no plugin: the pure core. Bytes per held event are in
//! `benches/memory.rs`. Run with `make bench-matcher`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use cojoin::event::{Event, Side};
use cojoin::join::{JoinKind, JoinState, JoinWindow, TaskQueue};

const EVENTS: i64 = 100_000;
const BASE_TS: i64 = 1_700_000_000_000;

fn event(topic: &str, key: u64, offset: i64, ts: i64, value_bytes: usize) -> Event {
    Event {
        topic: topic.into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(format!("k-{key:010}").into_bytes().into()),
        value: Some(vec![b'x'; value_bytes].into()),
        headers: Box::default(),
    }
}

fn lefts(value_bytes: usize) -> Vec<Event> {
    (0..EVENTS)
        .map(|i| event("orders", i as u64, i, BASE_TS + i * 10, value_bytes))
        .collect()
}

/// A window that holds every event of the run: nothing expires.
const HOLD_ALL: JoinWindow = JoinWindow {
    window_ms: 1 << 40,
    grace_ms: 0,
};

fn insert_all(state: &mut JoinState, side: Side, events: Vec<Event>) -> usize {
    let mut out = Vec::new();
    let mut outcomes = 0;
    for e in events {
        state.insert(side, e, &mut out);
        outcomes += out.len();
        out.clear();
    }
    outcomes
}

fn join_state(c: &mut Criterion) {
    let mut g = c.benchmark_group("join_state");
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.sample_size(20).measurement_time(Duration::from_secs(8));
    for value_bytes in [100, 1_000] {
        // Hold: a key of its own per event, nothing to match, nothing expires.
        g.bench_function(format!("insert, hold only, {value_bytes} B"), |b| {
            b.iter_batched(
                || lefts(value_bytes),
                |events| {
                    let mut state = JoinState::new(HOLD_ALL, JoinKind::Inner);
                    insert_all(&mut state, Side::LEFT, events);
                    state
                },
                BatchSize::PerIteration,
            )
        });
        // Probe and match: every right event finds one held left event.
        g.bench_function(format!("insert, probe + match, {value_bytes} B"), |b| {
            b.iter_batched(
                || {
                    let mut state = JoinState::new(HOLD_ALL, JoinKind::Inner);
                    insert_all(&mut state, Side::LEFT, lefts(value_bytes));
                    let rights: Vec<Event> = (0..EVENTS)
                        .map(|i| event("payments", i as u64, i, BASE_TS + i * 10 + 5, value_bytes))
                        .collect();
                    (state, rights)
                },
                |(mut state, rights)| {
                    let matches = insert_all(&mut state, Side::RIGHT, rights);
                    assert_eq!(matches, EVENTS as usize);
                    state
                },
                BatchSize::PerIteration,
            )
        });
        // Steady state, left join: a 1 s window holds 100 events, so every insert expires one,
        // and half of those are reported unmatched.
        g.bench_function(
            format!("insert, steady state with expiry, {value_bytes} B"),
            |b| {
                let window = JoinWindow {
                    window_ms: 1_000,
                    grace_ms: 0,
                };
                b.iter_batched(
                    || {
                        let mut state = JoinState::new(window, JoinKind::Left);
                        let warm: Vec<Event> = (0..200)
                            .map(|i| {
                                event(
                                    "orders",
                                    u64::MAX - i as u64,
                                    i,
                                    BASE_TS - 2_000 + i * 10,
                                    value_bytes,
                                )
                            })
                            .collect();
                        insert_all(&mut state, Side::LEFT, warm);
                        (state, lefts(value_bytes))
                    },
                    |(mut state, events)| {
                        let outcomes = insert_all(&mut state, Side::LEFT, events);
                        assert!(outcomes > 0);
                        state
                    },
                    BatchSize::PerIteration,
                )
            },
        );
    }
    g.finish();
}

fn task_queue(c: &mut Criterion) {
    let mut g = c.benchmark_group("task_queue");
    g.throughput(Throughput::Elements(2 * EVENTS as u64));
    g.sample_size(20);
    g.bench_function("push + next, 100 B", |b| {
        b.iter_batched(
            || {
                let mut events = Vec::with_capacity(2 * EVENTS as usize);
                for i in 0..EVENTS {
                    let ts = BASE_TS + i * 10;
                    events.push((Side::LEFT, event("orders", i as u64, i, ts, 100)));
                    events.push((Side::RIGHT, event("payments", i as u64, i, ts + 5, 100)));
                }
                events
            },
            |events| {
                let mut queue = TaskQueue::new(0);
                queue.set_replay(Side::LEFT, 0, None);
                queue.set_replay(Side::RIGHT, 0, None);
                let mut taken = 0;
                // Pushed in chunks as a consumer round would, then drained in timestamp order.
                let mut events = events.into_iter().peekable();
                while events.peek().is_some() {
                    for (side, e) in events.by_ref().take(1_000) {
                        queue.push(side, e);
                    }
                    while queue.next(0).is_some() {
                        taken += 1;
                    }
                }
                taken
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, join_state, task_queue);
criterion_main!(benches);
