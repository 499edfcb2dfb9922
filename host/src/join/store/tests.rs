//! Tests of the event store: in RAM here (records as pushed, segments, origins, the in-order
//! walk), with the helpers the others share; spilling in the submodules.
//!
//! - `spilled`: spilled events read, update, read back and release as in RAM.
//! - `spill_dir`: a process's spill directory, its lock, and other processes' leftovers.
//! - `corruption`: a spill file changed or cut short on disk is an error, never a wrong event.

mod corruption;
mod spill_dir;
mod spilled;

use super::*;
use crate::event::Header;

fn event(offset: i64, key: &[u8], value: Option<Vec<u8>>, headers: Vec<Header>) -> Event {
    Event {
        topic: "orders".into(),
        partition: 3,
        offset,
        timestamp: 1_700_000_000_000 + offset,
        key: Some(key.into()),
        value: value.map(Into::into),
        headers: headers.into(),
    }
}

fn links(side: Side) -> Links {
    Links {
        side,
        partner_offset: -1,
        next: NO_HANDLE,
        out_of_order: false,
    }
}

/// The message of the panic `f` ends in.
fn panic_message(f: impl FnOnce()) -> String {
    let payload =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("the call panics");
    payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| payload.downcast_ref::<&str>().unwrap().to_string())
}

/// A store that spills everything sealed (budget 0) into a fresh directory under `base`.
fn spilling_store(base: &std::path::Path) -> (EventStore, Arc<SpillDir>) {
    let dir = SpillDir::create(base).expect("a spill dir in a temp dir");
    let mut store = EventStore::default();
    store.spill_to(dir.clone());
    store.set_budget(0);
    (store, dir)
}

#[test]
fn an_event_comes_back_as_it_went_in_with_its_links() {
    let mut store = EventStore::default();
    let headers = vec![
        Header {
            key: "trace".into(),
            value: Some(b"abc".to_vec()),
        },
        Header {
            key: "empty".into(),
            value: None,
        },
        Header {
            key: "".into(),
            value: Some(Vec::new()),
        },
    ];
    let cases = [
        event(7, b"k-1", Some(b"hello".to_vec()), headers),
        event(8, b"k-2", None, Vec::new()),
        event(9, b"", Some(Vec::new()), Vec::new()),
    ];
    let handles: Vec<Handle> = cases
        .iter()
        .map(|e| store.push(e, links(Side::RIGHT)))
        .collect();
    for (h, e) in handles.iter().zip(&cases) {
        assert_eq!(store.event(*h), *e);
        assert_eq!(store.key(*h), e.key_bytes());
        assert_eq!(store.side(*h), Side::RIGHT);
        assert_eq!(store.next(*h), NO_HANDLE);
        assert_eq!(store.partner_offset(*h), -1);
    }
    store.set_next(handles[0], handles[2]);
    let head = store.head(handles[1]);
    store.set_partner_offset(handles[1], &head, 42);
    assert_eq!(store.next(handles[0]), handles[2]);
    assert_eq!(store.partner_offset(handles[1]), 42);
    assert_eq!(
        store.event(handles[0]),
        cases[0],
        "links do not touch the event"
    );
}

#[test]
fn handles_grow_in_arrival_order_across_segments() {
    let mut store = EventStore::default();
    let big = vec![b'x'; MAX_SEGMENT / 3];
    let handles: Vec<Handle> = (0..10)
        .map(|i| {
            store.push(
                &event(i, b"k", Some(big.clone()), Vec::new()),
                links(Side::LEFT),
            )
        })
        .collect();
    assert!(handles.windows(2).all(|w| w[0] < w[1]));
    assert!(
        store.segments.len() >= 4,
        "{} segments",
        store.segments.len()
    );
}

#[test]
fn an_event_larger_than_a_segment_gets_its_own() {
    let mut store = EventStore::default();
    let small = store.push(
        &event(0, b"a", Some(vec![1; 10]), Vec::new()),
        links(Side::LEFT),
    );
    let huge = event(1, b"b", Some(vec![2; MAX_SEGMENT * 2]), Vec::new());
    let h = store.push(&huge, links(Side::LEFT));
    assert_eq!(store.event(h), huge);
    assert_eq!(store.event(small).offset, 0);
}

#[test]
fn segments_are_freed_once_all_their_events_left_and_live_bytes_follow() {
    let mut store = EventStore::default();
    let value = vec![b'v'; 10_000];
    let handles: Vec<Handle> = (0..300)
        .map(|i| {
            store.push(
                &event(i, b"key", Some(value.clone()), Vec::new()),
                links(Side::LEFT),
            )
        })
        .collect();
    let segments = store.segments.len();
    assert!(segments >= 4);
    assert_eq!(store.live_bytes(), 300 * (HEADER + 3 + 10_000));
    // One event of the first segment stays: nothing can be popped yet, but emptied segments
    // behind it give their bytes back.
    for h in &handles[1..200] {
        store.remove(*h);
    }
    assert_eq!(store.segments.len(), segments);
    assert_eq!(store.segments[1].bytes.capacity(), 0);
    assert_eq!(store.event(handles[0]).offset, 0);
    store.remove(handles[0]);
    assert!(store.segments.len() < segments);
    for h in &handles[200..] {
        assert_eq!(store.event(*h).offset, store.offset(*h));
    }
    for h in &handles[200..] {
        store.remove(*h);
    }
    assert_eq!(store.live_bytes(), 0);
    assert_eq!(
        store.segments.len(),
        1,
        "the segment being filled is kept for reuse"
    );
}

#[test]
fn events_of_different_partitions_keep_their_origin() {
    let mut store = EventStore::default();
    let mut a = event(1, b"k", Some(vec![1]), Vec::new());
    let mut b = a.clone();
    b.topic = "payments".into();
    a.partition = 4;
    let ha = store.push(&a, links(Side::LEFT));
    let hb = store.push(&b, links(Side::RIGHT));
    assert_eq!(store.event(ha), a);
    assert_eq!(store.event(hb), b);
    assert_eq!(store.origins.len(), 2);
    store.push(&a, links(Side::LEFT));
    assert_eq!(store.origins.len(), 2, "an origin is stored once");
}

#[test]
fn as_many_origins_as_the_limit_keep_their_origin_and_flags() {
    // `plugin test` with a key from the value sends every (topic, partition) of the recording to
    // one task: the 257th panicked when the index was a u8. Every index bit is exercised, with
    // every flag beside it.
    let mut store = EventStore::default();
    let pushed: Vec<(Handle, Event, Side, bool)> = (0..MAX_ORIGINS)
        .map(|i| {
            let right = i % 2 == 1;
            let mut e = event(i as i64, b"k", Some(vec![1]), Vec::new());
            if right {
                e.topic = "payments".into();
            }
            if i % 3 == 0 {
                e.headers = vec![Header {
                    key: "h".into(),
                    value: Some(vec![2]),
                }]
                .into();
            }
            // Negative partitions too: the recording decides them.
            e.partition = (i / 2) as i32 - 1_000;
            let side = if right { Side::RIGHT } else { Side::LEFT };
            let out_of_order = i % 5 == 0;
            let h = store.push(
                &e,
                Links {
                    out_of_order,
                    ..links(side)
                },
            );
            (h, e, side, out_of_order)
        })
        .collect();
    assert_eq!(store.origins.len(), MAX_ORIGINS);
    for (h, e, side, out_of_order) in &pushed {
        assert_eq!(store.event(*h), *e);
        assert_eq!(store.side(*h), *side);
        assert_eq!(store.is_out_of_order(*h), *out_of_order);
    }
    // Removing sets a flag beside the index's top bits; the neighbours are untouched.
    store.remove(pushed[MAX_ORIGINS - 2].0);
    let (h, e, ..) = &pushed[MAX_ORIGINS - 1];
    assert_eq!(store.event(*h), *e);
    // An origin held already is no new one, past the limit too.
    let again = store.push(&pushed[300].1, links(Side::RIGHT));
    assert_eq!(store.event(again), pushed[300].1);
}

#[test]
fn one_origin_past_the_limit_stops_with_its_name_and_the_limit() {
    let mut store = EventStore::default();
    for p in 0..MAX_ORIGINS {
        let mut e = event(1, b"k", None, Vec::new());
        e.partition = p as i32;
        store.push(&e, links(Side::LEFT));
    }
    let mut e = event(1, b"k", None, Vec::new());
    e.partition = -7;
    let message = panic_message(|| {
        store.push(&e, links(Side::LEFT));
    });
    assert!(message.contains("\"orders\" partition -7"), "{message}");
    assert!(
        message.contains(&format!("at most {MAX_ORIGINS}")),
        "{message}"
    );
}

#[test]
fn the_in_order_walk_skips_removed_and_out_of_order_events_and_survives_freed_segments() {
    let mut store = EventStore::default();
    let value = vec![b'v'; 3_000];
    let handles: Vec<Handle> = (0..100)
        .map(|i| {
            let mut l = links(Side::LEFT);
            l.out_of_order = i % 3 == 1;
            store.push(&event(i, b"key", Some(value.clone()), Vec::new()), l)
        })
        .collect();
    let in_order: Vec<Handle> = handles
        .iter()
        .copied()
        .filter(|h| !store.is_out_of_order(*h))
        .collect();
    assert_eq!(in_order.len(), 67);
    // Out-of-order events leave early and in any order; the in-order ones from the front.
    let out_of_order: Vec<Handle> = handles
        .iter()
        .copied()
        .filter(|h| store.is_out_of_order(*h))
        .collect();
    for h in out_of_order.iter().rev() {
        store.remove(*h);
    }
    let mut cursor = store.in_order_from(handles[0]);
    let mut walked = Vec::new();
    while let Some(h) = cursor {
        walked.push(h);
        let after = store.after(h);
        store.remove(h);
        cursor = store.in_order_from(after);
    }
    assert_eq!(walked, in_order);
    assert_eq!(store.live_bytes(), 0);
    assert_eq!(store.live().count(), 0);
}

#[test]
fn live_lists_every_event_not_removed_in_push_order() {
    let mut store = EventStore::default();
    let handles: Vec<Handle> = (0..50)
        .map(|i| {
            store.push(
                &event(i, b"k", Some(vec![0; 5_000]), Vec::new()),
                links(Side::LEFT),
            )
        })
        .collect();
    for h in handles.iter().step_by(2) {
        store.remove(*h);
    }
    let live: Vec<i64> = store.live().map(|h| store.offset(h)).collect();
    assert_eq!(live, (1..50).step_by(2).collect::<Vec<_>>());
}

#[test]
fn removed_events_count_as_garbage_until_their_segment_is_freed() {
    let mut store = EventStore::default();
    let value = Some(vec![1; 1_000]);
    let handles: Vec<Handle> = (0..20)
        .map(|i| store.push(&event(i, b"k", value.clone(), vec![]), links(Side::LEFT)))
        .collect();
    assert_eq!(store.garbage_bytes(), 0);
    let size = store.after(handles[0]) - handles[0];
    store.remove(handles[0]);
    assert_eq!(store.garbage_bytes() as u64, size);
    // The first segment (4 kB) holds the first three events: removing them all frees it.
    store.remove(handles[1]);
    store.remove(handles[2]);
    assert_eq!(store.garbage_bytes(), 0);
    assert!(
        handles[3] >> 32 > 0,
        "the fourth event is in the second segment"
    );
    assert_eq!(store.live_from(0), Some(handles[3]));
    assert!(store.filling_start() <= handles[19] && store.filling_start() > handles[3]);
    assert!(!store.is_tombstone(handles[3]));
}
