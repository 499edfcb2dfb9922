//! Spilled events: read and updated in place as in RAM, segments read back whole by the walk,
//! files deleted as their segments die, and a failed spill that keeps the store in RAM.

use super::*;

/// Spill files in `dir`, its lock file not counted.
fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| e.as_ref().is_ok_and(|e| e.file_name() != "lock"))
            .count()
    })
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
        .map(|e| store.push(e, links(Side::LEFT)))
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
            let mut l = links(Side::RIGHT);
            l.partner_offset = 1_000 + i;
            store.push(&event(i, b"k", Some(vec![1; 3_000]), Vec::new()), l)
        })
        .collect();
    let spilled = store.stats().spilled_bytes_total;
    assert!(spilled > 0);
    // Spilled segments give lower bounds of what their events need, per side.
    let needs: Vec<(Side, i64)> = store.needs().flat_map(|n| n.offsets(|_| true)).collect();
    assert!(needs.contains(&(Side::RIGHT, 0)) && needs.contains(&(Side::LEFT, 1_000)));

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
        links(Side::LEFT),
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
            links(Side::LEFT),
        );
    }
    assert!(files_in(dir.path()) >= 1);
    let paths = other.spill_paths();
    assert!(!paths.is_empty());
    drop(other);
    assert!(paths.iter().all(|p| !p.exists()), "{paths:?}");
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
        .map(|e| store.push(e, links(Side::LEFT)))
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
