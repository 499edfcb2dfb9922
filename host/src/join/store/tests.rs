use super::*;

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
        .map(|e| store.push(e, links(Side::Right)))
        .collect();
    for (h, e) in handles.iter().zip(&cases) {
        assert_eq!(store.event(*h), *e);
        assert_eq!(store.key(*h), e.key_bytes());
        assert_eq!(store.side(*h), Side::Right);
        assert_eq!(store.next(*h), NO_HANDLE);
        assert_eq!(store.partner_offset(*h), -1);
    }
    store.set_next(handles[0], handles[2]);
    store.set_partner_offset(handles[1], 42);
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
                links(Side::Left),
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
        links(Side::Left),
    );
    let huge = event(1, b"b", Some(vec![2; MAX_SEGMENT * 2]), Vec::new());
    let h = store.push(&huge, links(Side::Left));
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
                links(Side::Left),
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
    let ha = store.push(&a, links(Side::Left));
    let hb = store.push(&b, links(Side::Right));
    assert_eq!(store.event(ha), a);
    assert_eq!(store.event(hb), b);
    assert_eq!(store.origins.len(), 2);
    store.push(&a, links(Side::Left));
    assert_eq!(store.origins.len(), 2, "an origin is stored once");
}

#[test]
fn the_in_order_walk_skips_removed_and_out_of_order_events_and_survives_freed_segments() {
    let mut store = EventStore::default();
    let value = vec![b'v'; 3_000];
    let handles: Vec<Handle> = (0..100)
        .map(|i| {
            let mut l = links(Side::Left);
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
                links(Side::Left),
            )
        })
        .collect();
    for h in handles.iter().step_by(2) {
        store.remove(*h);
    }
    let live: Vec<i64> = store.live().map(|h| store.offset(h)).collect();
    assert_eq!(live, (1..50).step_by(2).collect::<Vec<_>>());
}
