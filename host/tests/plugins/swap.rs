//! Hot swap under load: several workers call continuously while the registry swaps
//! Rust → Python → Rust → JS, with a broken file offered in between.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use cojoin::plugin::{PluginLimits, PluginRegistry};

use super::{body, event, plugin_path, registry};

/// What one call saw: the key it sent and who answered.
struct Answer {
    worker: usize,
    key: String,
    generation: u64,
    by: String,
}

const WORKERS: usize = 4;

fn bytes(file: &str) -> Vec<u8> {
    std::fs::read(plugin_path(file)).unwrap()
}

#[test]
fn every_call_is_answered_once_by_one_version_while_versions_swap() {
    let registry = registry("order_paid_rust.wasm", PluginLimits::default(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Result<Answer, String>>();
    let mut threads = Vec::new();
    for w in 0..WORKERS {
        let mut worker = registry.handle().unwrap();
        let (stop, tx) = (stop.clone(), tx.clone());
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}-{n}");
                let result = worker.on_match(
                    key.as_bytes(),
                    &event("orders", &key, n as i64),
                    &event("payments", &key, n as i64),
                );
                let answer = match result {
                    Ok(out) if out.len() == 1 && body(&out[0])["order_id"] == key.as_str() => {
                        Ok(Answer {
                            worker: w,
                            key,
                            generation: worker.version().generation,
                            by: body(&out[0])["by"].as_str().unwrap().to_owned(),
                        })
                    }
                    Ok(out) => Err(format!("call {key}: unexpected outputs {out:?}")),
                    Err(e) => Err(format!("call {key} failed during swaps: {e}")),
                };
                if tx.send(answer).is_err() {
                    return;
                }
                n += 1;
            }
        }));
    }
    drop(tx);

    // generation -> language expected to answer for it
    let mut expected: HashMap<u64, &str> = HashMap::from([(1, "rust")]);
    let steps: [(&str, Option<&str>); 5] = [
        ("order_paid_python.wasm", Some("python")),
        ("garbage", None),
        ("order_paid_rust.wasm", Some("rust")),
        ("not_a_plugin.wasm", None),
        ("order_paid_js.wasm", Some("js")),
    ];
    for (file, lang) in steps {
        std::thread::sleep(Duration::from_millis(300));
        let before = registry.current().generation;
        let candidate = if file == "garbage" {
            b"\0asm garbage".to_vec()
        } else {
            bytes(file)
        };
        match (registry.swap(&candidate), lang) {
            (Ok(version), Some(lang)) => {
                assert_eq!(version.generation, before + 1);
                expected.insert(version.generation, lang);
            }
            (Err(e), None) => {
                assert_eq!(
                    registry.current().generation,
                    before,
                    "a refused file changed the version: {e}"
                );
            }
            (Ok(v), None) => panic!("{file} was accepted as generation {}", v.generation),
            (Err(e), Some(_)) => panic!("{file} was refused: {e}"),
        }
    }
    let last = registry.current().generation;
    // Let every worker make calls on the last version, then stop them.
    let mut answers: Vec<Answer> = Vec::new();
    let mut on_last = [0usize; WORKERS];
    while on_last.iter().any(|&c| c < 50) {
        let answer = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("workers stopped answering")
            .unwrap_or_else(|e| panic!("{e}"));
        if answer.generation == last {
            on_last[answer.worker] += 1;
        }
        answers.push(answer);
    }
    stop.store(true, Ordering::Relaxed);
    while let Ok(answer) = rx.recv_timeout(Duration::from_secs(30)) {
        answers.push(answer.unwrap_or_else(|e| panic!("{e}")));
    }
    for t in threads {
        t.join().unwrap();
    }

    let mut last_generation = [0u64; WORKERS];
    let mut seen = HashMap::new();
    let mut per_generation: HashMap<u64, usize> = HashMap::new();
    for a in &answers {
        assert!(
            seen.insert(a.key.clone(), ()).is_none(),
            "{} answered twice",
            a.key
        );
        assert_eq!(
            a.by, expected[&a.generation],
            "{} answered by the wrong version",
            a.key
        );
        assert!(
            a.generation >= last_generation[a.worker],
            "worker {} went back a generation",
            a.worker
        );
        last_generation[a.worker] = a.generation;
        *per_generation.entry(a.generation).or_default() += 1;
    }
    for (w, generation) in last_generation.iter().enumerate() {
        assert_eq!(
            *generation, last,
            "worker {w} never reached the last version"
        );
    }
    // Every published version served calls (each was current for 300 ms).
    for generation in expected.keys() {
        assert!(
            per_generation.get(generation).copied().unwrap_or(0) > 0,
            "generation {generation} served nothing"
        );
    }
    println!(
        "calls per generation: {per_generation:?}, total {}",
        answers.len()
    );
}

#[test]
fn swapping_in_the_running_bytes_changes_nothing() {
    let registry: Arc<PluginRegistry> =
        registry("order_paid_rust.wasm", PluginLimits::default(), &[]);
    let again = registry.swap(&bytes("order_paid_rust.wasm")).unwrap();
    assert_eq!(again.generation, 1);
}

#[test]
fn a_worker_follows_a_swap_on_its_next_call_with_an_instance_made_ahead() {
    let registry = registry("order_paid_rust.wasm", PluginLimits::default(), &[]);
    let mut worker = registry.handle().unwrap();
    let e = event("orders", "k", 1);
    assert_eq!(
        body(&worker.on_match(b"k", &e, &e).unwrap()[0])["by"],
        "rust"
    );
    registry.swap(&bytes("order_paid_python.wasm")).unwrap();
    assert_eq!(
        worker.version().generation,
        1,
        "no switch in the middle of nothing"
    );
    assert_eq!(
        body(&worker.on_match(b"k", &e, &e).unwrap()[0])["by"],
        "python"
    );
    assert_eq!(worker.version().generation, 2);
}

#[test]
fn an_upload_into_a_plugin_directory_is_kept_where_the_watch_and_a_restart_find_it() {
    use cojoin::admin::{route, AdminState, Request};

    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        plugin_path("order_paid_rust.wasm"),
        dir.path().join("order-paid.wasm"),
    )
    .unwrap();
    let registry = PluginRegistry::from_file(
        super::engine(),
        &cojoin::hotswap::resolve(dir.path()).unwrap(),
        PluginLimits::default(),
        vec![],
    )
    .unwrap();
    let state = AdminState {
        metrics: Arc::default(),
        registry: registry.clone(),
        heartbeat_ms: Arc::default(),
        token: None,
        upload_dir: Some(dir.path().to_owned()),
    };
    let upload = bytes("noop.wasm");
    // The file's mtime must be later than the first one's for "newest" to mean it.
    std::thread::sleep(Duration::from_millis(20));
    let reply = route(
        Request {
            method: "PUT",
            target: "/plugins/noop-v2.wasm",
            authorization: None,
            body: Ok(upload.clone()),
        },
        &state,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let kept = dir.path().join("noop-v2.wasm");
    assert!(
        reply.body.contains(&*kept.display().to_string()),
        "{}",
        reply.body
    );
    assert_eq!(std::fs::read(&kept).unwrap(), upload);
    assert_eq!(registry.current().name, "noop-v2");
    // A restart (or the watch) resolves the directory to the upload.
    assert_eq!(cojoin::hotswap::resolve(dir.path()).unwrap(), kept);
    // No partial file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}
