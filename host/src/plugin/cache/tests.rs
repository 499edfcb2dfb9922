//! The whole-component cache against the file system: trust, recency, concurrent stores.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Barrier};

use wasmtime::Engine;

use super::{private_files, CacheOutcome, CompileCache};

/// The smallest component: a header and nothing else. Compiles in milliseconds.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";
const GIB: u64 = 1 << 30;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn cwasm_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect()
}

fn outcome(cache: &CompileCache, engine: &Engine, key: &str) -> CacheOutcome {
    cache.load(engine, key, EMPTY_COMPONENT).unwrap().1
}

#[test]
fn an_entry_of_ours_in_a_private_directory_is_used() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let engine = Engine::default();
    let cache = CompileCache::new(dir.clone(), &engine, GIB).unwrap();
    assert_eq!(mode(&dir), 0o700, "created private");
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Compiled);
    let entries = cwasm_files(&dir);
    assert_eq!(entries.len(), 1);
    assert_eq!(mode(&entries[0]), 0o600);
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Hit);
}

#[test]
fn a_group_writable_directory_is_neither_read_nor_written() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::default();
    let cache = CompileCache::new(dir.path().to_owned(), &engine, GIB).unwrap();
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Compiled);

    chmod(dir.path(), 0o770);
    assert_eq!(
        outcome(&cache, &engine, "k"),
        CacheOutcome::Uncached,
        "not read"
    );
    assert_eq!(outcome(&cache, &engine, "other"), CacheOutcome::Uncached);
    assert_eq!(cwasm_files(dir.path()).len(), 1, "not written");
    // Opening it again changes nothing.
    let reopened = CompileCache::new(dir.path().to_owned(), &engine, GIB).unwrap();
    assert_eq!(outcome(&reopened, &engine, "k"), CacheOutcome::Uncached);

    chmod(dir.path(), 0o700);
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Hit);
}

#[test]
fn an_entry_others_can_write_is_recompiled_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::default();
    let cache = CompileCache::new(dir.path().to_owned(), &engine, GIB).unwrap();
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Compiled);
    let entry = cwasm_files(dir.path()).remove(0);
    chmod(&entry, 0o646);
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Compiled);
    assert_eq!(mode(&entry), 0o600);
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Hit);
}

#[test]
fn a_component_larger_than_the_cap_is_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::default();
    let cache = CompileCache::new(dir.path().to_owned(), &engine, 16).unwrap();
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Compiled);
    assert!(cwasm_files(dir.path()).is_empty());
}

/// Two uploads of the same plugin compile on two threads and store the same key at once: each
/// store must succeed and leave one whole entry, no temporary file.
#[test]
fn two_threads_storing_the_same_key_at_once_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("same-key.cwasm"));
    let content: Arc<Vec<u8>> = Arc::new((0..4 << 20).map(|i| (i % 251) as u8).collect());
    for _ in 0..20 {
        let barrier = Arc::new(Barrier::new(2));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (barrier, path, content) = (barrier.clone(), path.clone(), content.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    private_files::write_entry(&path, &content)
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap().expect("a concurrent store succeeds");
        }
        assert!(std::fs::read(&*path).unwrap() == *content, "a whole entry");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    // And through the cache: both loads get a working component.
    let engine = Engine::default();
    let cache = Arc::new(CompileCache::new(dir.path().join("c"), &engine, GIB).unwrap());
    let barrier = Arc::new(Barrier::new(2));
    let loads: Vec<_> = (0..2)
        .map(|_| {
            let (barrier, cache, engine) = (barrier.clone(), cache.clone(), engine.clone());
            std::thread::spawn(move || {
                barrier.wait();
                cache
                    .load(&engine, "k", EMPTY_COMPONENT)
                    .map(|(_, outcome)| outcome)
            })
        })
        .collect();
    for load in loads {
        let outcome = load.join().unwrap().unwrap();
        assert!(matches!(
            outcome,
            CacheOutcome::Compiled | CacheOutcome::Hit
        ));
    }
    assert_eq!(outcome(&cache, &engine, "k"), CacheOutcome::Hit);
    assert_eq!(std::fs::read_dir(dir.path().join("c")).unwrap().count(), 1);
}
