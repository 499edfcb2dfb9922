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

/// A store that spills everything sealed (budget 0) into a fresh directory under `base`.
fn spilling_store(base: &std::path::Path) -> (EventStore, Arc<SpillDir>) {
    let dir = SpillDir::create(base).expect("a spill dir in a temp dir");
    let mut store = EventStore::default();
    store.spill_to(dir.clone());
    store.set_budget(0);
    (store, dir)
}

fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

#[test]
fn spilled_events_read_and_update_as_in_ram_and_their_files_go_when_they_die() {
    let base = tempfile::tempdir().unwrap();
    let (mut store, dir) = spilling_store(base.path());
    let headers = vec![Header {
        key: "trace".into(),
        value: Some(b"abc".to_vec()),
    }];
    let events: Vec<Event> = (0..100)
        .map(|i| match i % 3 {
            0 => event(i, b"key-a", Some(vec![i as u8; 5_000]), Vec::new()),
            1 => event(i, b"", None, headers.clone()),
            _ => event(i, b"k", Some(Vec::new()), headers.clone()),
        })
        .collect();
    let handles: Vec<Handle> = events
        .iter()
        .map(|e| store.push(e, links(Side::Left)))
        .collect();
    let stats = store.stats();
    assert!(stats.spilled_bytes_total > 0);
    assert_eq!(stats.disk_bytes as u64, stats.spilled_bytes_total);
    assert!(
        stats.ram_bytes <= MAX_SEGMENT,
        "only the segment being filled stays: {stats:?}"
    );
    assert_eq!(files_in(dir.path()), 1);
    assert!(
        store.needs().count() > 1,
        "the spilled segments keep their needs"
    );
    assert!(store.live().count() < handles.len());

    for (h, e) in handles.iter().zip(&events) {
        assert_eq!(store.event(*h), *e);
        assert_eq!(&*store.key(*h), e.key_bytes());
        assert!(store.key_is(*h, e.key_bytes()));
        assert!(!store.key_is(*h, b"key-b"));
        assert_eq!(store.head(*h).offset, e.offset);
    }
    // Links of a spilled event change in place.
    store.set_next(handles[0], handles[5]);
    let head = store.head(handles[0]);
    store.set_partner_offset(handles[0], &head, 77);
    assert_eq!(store.next(handles[0]), handles[5]);
    assert_eq!(store.partner_offset(handles[0]), 77);
    assert_eq!(store.event(handles[0]), events[0]);

    // Removed in order, spilled segments are released one by one, and the file with the last.
    for h in &handles[..50] {
        store.remove(*h);
    }
    assert_eq!(files_in(dir.path()), 1);
    for h in &handles[50..] {
        store.remove(*h);
    }
    assert_eq!(store.live_bytes(), 0);
    assert_eq!(store.stats().disk_bytes, 0);
    assert_eq!(files_in(dir.path()), 0);
    assert!(store.spill_paths().is_empty());
}

#[test]
fn a_segment_read_back_is_whole_and_counted_and_dropping_the_store_deletes_its_files() {
    let base = tempfile::tempdir().unwrap();
    let (mut store, dir) = spilling_store(base.path());
    let handles: Vec<Handle> = (0..40)
        .map(|i| {
            let mut l = links(Side::Right);
            l.partner_offset = 1_000 + i;
            store.push(&event(i, b"k", Some(vec![1; 3_000]), Vec::new()), l)
        })
        .collect();
    let spilled = store.stats().spilled_bytes_total;
    assert!(spilled > 0);
    // Spilled segments give lower bounds of what their events need, per side.
    let needs: Vec<(Side, i64)> = store.needs().flat_map(|n| n.offsets(|_| true)).collect();
    assert!(needs.contains(&(Side::Right, 0)) && needs.contains(&(Side::Left, 1_000)));

    store.read_back(handles[0]);
    let stats = store.stats();
    assert!(stats.read_back_bytes_total > 0 && stats.read_back_bytes_total < spilled);
    assert_eq!(store.event(handles[0]).offset, 0);
    assert!(store.live().any(|h| h == handles[0]));
    // The walk reads back every spilled segment it reaches.
    let mut walked = 0;
    let mut cursor = store.in_order_from(handles[0]);
    while let Some(h) = cursor {
        walked += 1;
        cursor = store.in_order_from(store.after(h));
    }
    assert_eq!(walked, 40);
    assert_eq!(store.stats().read_back_bytes_total, spilled);
    assert_eq!(store.stats().disk_bytes, 0);
    // Read back segments are not spilled again: what stays on disk is released as read back.
    store.push(
        &event(40, b"k", Some(vec![1; 3_000]), Vec::new()),
        links(Side::Left),
    );
    assert_eq!(store.stats().spilled_bytes_total, spilled);
    assert_eq!(store.stats().disk_bytes, 0, "every segment was released");

    let (mut other, same) = spilling_store(base.path());
    assert!(
        Arc::ptr_eq(&dir, &same),
        "one spill dir per process and base"
    );
    for i in 0..40 {
        other.push(
            &event(i, b"k", Some(vec![1; 3_000]), Vec::new()),
            links(Side::Left),
        );
    }
    assert!(files_in(dir.path()) >= 1);
    let paths = other.spill_paths();
    assert!(!paths.is_empty());
    drop(other);
    assert!(paths.iter().all(|p| !p.exists()), "{paths:?}");
}

#[test]
fn a_spill_dir_removes_the_leftovers_of_dead_processes_only_and_goes_with_its_last_user() {
    let base = tempfile::tempdir().unwrap();
    // Above any pid_max (4194304 at most on Linux): no such process.
    let dead = base.path().join("cojoin-4999999");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join("0.seg"), b"old").unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let live = base.path().join(format!("cojoin-{}", child.id()));
    std::fs::create_dir_all(&live).unwrap();
    let other = base.path().join("cojoin-data");
    std::fs::create_dir_all(&other).unwrap();

    let dir = SpillDir::create(base.path()).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!dead.exists(), "a dead process's files are removed");
    assert!(live.exists(), "a running process's files are kept");
    assert!(other.exists(), "what is not ours is kept");
    let own = base.path().join(format!("cojoin-{}", std::process::id()));
    assert_eq!(dir.path(), own);
    assert!(own.is_dir());
    let second_user = dir.clone();
    drop(dir);
    assert!(own.is_dir());
    drop(second_user);
    assert!(!own.exists());
}

#[test]
fn a_failed_spill_keeps_the_segment_in_ram_and_stops_spilling() {
    let base = tempfile::tempdir().unwrap();
    let (mut store, dir) = spilling_store(base.path());
    // No directory to write into (as root, permissions would not stop the write).
    std::fs::remove_dir_all(dir.path()).unwrap();
    let events: Vec<Event> = (0..30)
        .map(|i| event(i, b"k", Some(vec![i as u8; 4_000]), Vec::new()))
        .collect();
    let handles: Vec<Handle> = events
        .iter()
        .map(|e| store.push(e, links(Side::Left)))
        .collect();
    let stats = store.stats();
    assert_eq!(stats.spilled_bytes_total, 0);
    assert_eq!(stats.disk_bytes, 0);
    assert!(stats.ram_bytes > 30 * 4_000);
    assert!(store.spill.as_ref().unwrap().failed);
    for (h, e) in handles.iter().zip(&events) {
        assert_eq!(store.event(*h), *e);
    }
    assert_eq!(store.live().count(), 30);
}
