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
            let side = if right { Side::Right } else { Side::Left };
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
    let again = store.push(&pushed[300].1, links(Side::Right));
    assert_eq!(store.event(again), pushed[300].1);
}

#[test]
fn one_origin_past_the_limit_stops_with_its_name_and_the_limit() {
    let mut store = EventStore::default();
    for p in 0..MAX_ORIGINS {
        let mut e = event(1, b"k", None, Vec::new());
        e.partition = p as i32;
        store.push(&e, links(Side::Left));
    }
    let mut e = event(1, b"k", None, Vec::new());
    e.partition = -7;
    let message = panic_message(|| {
        store.push(&e, links(Side::Left));
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

    // The old layout with our own pid: maybe an older host's in another PID namespace.
    let same_pid = base.path().join(format!("cojoin-{}", std::process::id()));
    std::fs::create_dir_all(&same_pid).unwrap();

    let dir = SpillDir::create(base.path()).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!dead.exists(), "a dead process's files are removed");
    assert!(live.exists(), "a running process's files are kept");
    assert!(
        same_pid.exists(),
        "a directory of the old layout with our pid is kept"
    );
    assert!(other.exists(), "what is not ours is kept");
    let own = dir.path().to_owned();
    assert_eq!(own.parent(), Some(base.path()));
    let name = own.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("cojoin-{}-", std::process::id())),
        "{name}"
    );
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

fn store_in(dir: Arc<SpillDir>) -> EventStore {
    let mut store = EventStore::default();
    store.spill_to(dir);
    store.set_budget(0);
    store
}

fn is_inside(path: &std::path::Path, dir: &std::path::Path) -> bool {
    path.parent() == Some(dir)
}

#[test]
fn two_hosts_with_the_same_pid_get_their_own_directories_and_keep_their_own_events() {
    // Two hosts in two containers sharing state.dir, both pid 1.
    let base = tempfile::tempdir().unwrap();
    let a = SpillDir::create_for_pid(base.path(), 1).unwrap();
    let b = SpillDir::create_for_pid(base.path(), 1).unwrap();
    assert_ne!(a.path(), b.path());
    for d in [&a, &b] {
        let name = d.path().file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("cojoin-1-"), "{name}");
        assert!(d.path().join("lock").is_file());
    }
    let (mut store_a, mut store_b) = (store_in(a.clone()), store_in(b.clone()));
    let events = |fill: fn(i64) -> u8| -> Vec<Event> {
        (0..60)
            .map(|i| event(i, b"k", Some(vec![fill(i); 3_000]), Vec::new()))
            .collect()
    };
    let (events_a, events_b) = (events(|i| i as u8), events(|i| 255 - i as u8));
    let mut handles_a = Vec::new();
    let mut handles_b = Vec::new();
    // Interleaved, as two hosts spill at the same time.
    for (ea, eb) in events_a.iter().zip(&events_b) {
        handles_a.push(store_a.push(ea, links(Side::Left)));
        handles_b.push(store_b.push(eb, links(Side::Left)));
    }
    let (paths_a, paths_b) = (store_a.spill_paths(), store_b.spill_paths());
    assert!(!paths_a.is_empty() && !paths_b.is_empty());
    assert!(
        paths_a.iter().all(|p| is_inside(p, a.path())),
        "{paths_a:?}"
    );
    assert!(
        paths_b.iter().all(|p| is_inside(p, b.path())),
        "{paths_b:?}"
    );
    for (h, e) in handles_b.iter().zip(&events_b) {
        assert_eq!(store_b.event(*h), *e);
    }
    // One host goes: the other's files and events stay.
    drop(store_b);
    drop(b);
    assert!(paths_a.iter().all(|p| p.is_file()));
    assert!(a.path().join("lock").is_file());
    for (h, e) in handles_a.iter().zip(&events_a) {
        assert_eq!(store_a.event(*h), *e);
    }
    let path_a = a.path().to_owned();
    drop(store_a);
    drop(a);
    assert!(!path_a.exists());
}

#[test]
fn leftovers_are_removed_by_their_lock_and_a_locked_directory_never_whatever_its_pid() {
    let base = tempfile::tempdir().unwrap();
    // A live host whose pid is no process here (another PID namespace): its lock is held.
    let live = SpillDir::create_for_pid(base.path(), 4_000_000_000).unwrap();
    std::fs::write(live.path().join("0.seg"), b"live").unwrap();
    // A host that died: its lock file is there, locked by nobody.
    let dead = base.path().join("cojoin-4000000001-00000000000000ff");
    std::fs::create_dir(&dead).unwrap();
    std::fs::write(dead.join("lock"), b"").unwrap();
    std::fs::write(dead.join("0.seg"), b"dead").unwrap();
    // No lock file: being created right now if not empty, removed if empty.
    let starting = base.path().join("cojoin-4000000002-0000000000000001");
    std::fs::create_dir(&starting).unwrap();
    std::fs::write(starting.join("x"), b"").unwrap();
    let empty = base.path().join("cojoin-4000000003-0000000000000002");
    std::fs::create_dir(&empty).unwrap();
    // Not a spill directory.
    let other = base.path().join("cojoin-4000000004-not-hex");
    std::fs::create_dir(&other).unwrap();

    let dir = SpillDir::create(base.path()).unwrap();
    assert!(
        live.path().join("0.seg").is_file(),
        "a locked directory is kept"
    );
    assert!(!dead.exists(), "an unlocked leftover is removed");
    assert!(starting.exists());
    assert!(!empty.exists());
    assert!(other.exists());
    assert_ne!(dir.path(), live.path());

    drop(dir);
    drop(live);

    // A host in another process: kept while it holds its lock, removed once it was killed.
    let other_host = base.path().join("cojoin-1-0000000000000005");
    std::fs::create_dir(&other_host).unwrap();
    let lock = other_host.join("lock");
    std::fs::write(&lock, b"").unwrap();
    // The shell locks its fd 9 with flock(1) and becomes `sleep`, which holds the lock.
    let mut child = std::process::Command::new("sh")
        .args(["-c", r#"exec 9>>"$0" && flock -n 9 && exec sleep 30"#])
        .arg(&lock)
        .spawn()
        .expect("sh and flock(1) of util-linux");
    while std::fs::File::open(&lock).unwrap().try_lock().is_ok() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(SpillDir::create_for_pid(base.path(), 1).unwrap());
    assert!(other_host.exists(), "its lock is held");
    let _ = child.kill();
    let _ = child.wait();
    drop(SpillDir::create_for_pid(base.path(), 1).unwrap());
    assert!(!other_host.exists(), "its host is gone");
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

/// Overwrites one byte of `path` at `at` with another value.
fn flip_byte(path: &std::path::Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

#[test]
fn a_spilled_event_changed_on_disk_is_an_error_naming_the_file_never_a_wrong_event() {
    let base = tempfile::tempdir().unwrap();
    let (mut store, _dir) = spilling_store(base.path());
    let events: Vec<Event> = (0..40)
        .map(|i| event(i, b"key", Some(vec![i as u8; 3_000]), Vec::new()))
        .collect();
    let handles: Vec<Handle> = events
        .iter()
        .map(|e| store.push(e, links(Side::Left)))
        .collect();
    let path = store.spill_paths()[0].clone();
    // The first event opens the first segment, at the start of the file.
    assert_eq!(handles[0] & u64::from(u32::MAX), 0);
    // Its links change in place on disk, checksums with them.
    store.set_next(handles[0], handles[1]);
    assert_eq!(store.event(handles[0]), events[0]);
    // A byte of its value, and one of its key, as another process would write them.
    flip_byte(&path, (HEADER + 3 + 100) as u64);
    for read in [
        Box::new(|s: &mut EventStore| drop(s.event(handles[0]))) as Box<dyn Fn(&mut EventStore)>,
        Box::new(|s: &mut EventStore| {
            let _ = s.key_is(handles[0], b"key");
        }),
        Box::new(|s: &mut EventStore| s.set_next(handles[0], handles[2])),
        Box::new(|s: &mut EventStore| s.read_back(handles[0])),
    ] {
        let msg = panic_message(|| read(&mut store));
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("not what this host wrote"),
            "{msg}"
        );
        assert!(msg.contains("bytes 0..4096"), "{msg}");
    }
    // Events in other blocks read as before: the third segment starts past the first block (the
    // first two, of 4 and 8 KiB, hold three events of 3,045 bytes).
    let far = handles
        .iter()
        .position(|h| h >> 32 >= (handles[0] >> 32) + 2)
        .unwrap();
    assert_eq!(far, 3);
    assert_eq!(store.event(handles[far]), events[far]);
}

#[test]
fn every_read_of_a_spill_file_checks_the_blocks_it_touches() {
    let base = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(base.path()).unwrap();
    let mut spill = Spill::new(dir);
    let bytes = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    };
    // Segments across block boundaries: file bytes 0..5000, 5000..305000, 305000..305010.
    let segments = [bytes(5_000, 1), bytes(300_000, 2), bytes(10, 3)];
    let disks: Vec<Disk> = segments.iter().map(|s| spill.write(s).unwrap()).collect();
    for (d, s) in disks.iter().zip(&segments) {
        let mut buf = vec![0; s.len()];
        spill.read(d, 0, &mut buf);
        assert_eq!(&buf, s);
    }
    // An overwrite across a block boundary (file byte 8190..8200) keeps its blocks' checksums.
    spill.write_at(&disks[1], 3_190, &[9; 10]);
    let mut want = segments[1].clone();
    want[3_190..3_200].fill(9);
    assert_eq!(spill.read_back(&disks[1]), want);

    // Damage file byte 200_000: the block 196_608..200_704, in the middle of the second segment.
    let path = spill.paths()[0].clone();
    flip_byte(&path, 200_000);
    let mut small = [0; 8];
    spill.read(&disks[1], 100_000, &mut small);
    spill.read(&disks[2], 0, &mut small);
    let damaged = |msg: String| {
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("bytes 196608..200704"),
            "{msg}"
        );
    };
    damaged(panic_message(|| {
        spill.read(&disks[1], 195_000, &mut small);
    }));
    damaged(panic_message(|| spill.write_at(&disks[1], 195_000, &[1])));
    damaged(panic_message(|| drop(spill.read_back(&disks[1]))));

    // A file cut short is an error naming it too.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(304_000)
        .unwrap();
    let msg = panic_message(|| spill.read(&disks[2], 0, &mut small));
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}
