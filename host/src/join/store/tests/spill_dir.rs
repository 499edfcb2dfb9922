//! A process's spill directory: its own per host even with a shared pid, held by its lock, gone
//! with its last user, and what it removes of other processes' leftovers (and what it keeps).

use super::*;

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
        handles_a.push(store_a.push(ea, links(Side::LEFT)));
        handles_b.push(store_b.push(eb, links(Side::LEFT)));
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
