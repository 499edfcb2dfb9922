//! Plugin load times per language (cold compile, cached load, instantiate + init), timed with std
//! because one cold compile of the Python component takes seconds. The per-call cost is in
//! `benches/plugin_call.rs` (criterion). Prints medians; run with `make bench`.
//!
//! Each figure is the median of several runs in one process on whatever machine runs it; compare
//! rows of one run rather than numbers across machines.

use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "../tests/support/mod.rs"]
mod support;
use support::{event_100b as event, plugin_path, BENCH_PLUGINS};

use cojoin::plugin::{EngineOptions, PluginEngine, PluginLimits, PluginRegistry};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 10_000 {
        format!("{:.2} µs", ns as f64 / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn engine(cache: Option<PathBuf>) -> std::sync::Arc<PluginEngine> {
    PluginEngine::new(EngineOptions {
        cache_dir: cache,
        ..EngineOptions::default()
    })
    .unwrap()
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported.
    let cache = tempfile::tempdir().unwrap();
    const RUNS: usize = 5;
    let (a, b) = (
        event("orders", "order-000123"),
        event("payments", "order-000123"),
    );

    // For profilers: `COJOIN_BENCH_PROFILE=noop.wasm` only loops on that plugin for 5 s.
    if let Ok(file) = std::env::var("COJOIN_BENCH_PROFILE") {
        let registry = PluginRegistry::from_file(
            engine(Some(cache.path().to_owned())),
            &plugin_path(&file),
            PluginLimits::default(),
            vec![],
        )
        .unwrap();
        let mut worker = registry.handle().unwrap();
        let started = Instant::now();
        let mut calls = 0u64;
        while started.elapsed() < Duration::from_secs(5) {
            for _ in 0..1000 {
                std::hint::black_box(worker.on_match(a.key_bytes(), &a, &b).unwrap());
            }
            calls += 1000;
        }
        println!(
            "{file}: {:.2} µs per call",
            started.elapsed().as_secs_f64() * 1e6 / calls as f64
        );
        return;
    }

    let warm = engine(Some(cache.path().to_owned()));
    println!("## load times (median; cold compile: 3 runs, others: {RUNS} runs)\n");
    println!("| plugin | size | cold compile | from the function cache | cached load | instantiate + init | cached, ready to call |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (label, file) in BENCH_PLUGINS {
        let bytes = std::fs::read(plugin_path(file)).unwrap();
        let cold = median(
            (0..3)
                .map(|_| {
                    let e = engine(None);
                    let started = Instant::now();
                    e.compile(file, &bytes).unwrap();
                    started.elapsed()
                })
                .collect(),
        );
        // A fresh engine each time so nothing is shared in memory: only the disk cache.
        warm.compile(file, &bytes).unwrap();
        let cached = median(
            (0..RUNS)
                .map(|_| {
                    let e = engine(Some(cache.path().to_owned()));
                    let started = Instant::now();
                    let c = e.compile(file, &bytes).unwrap();
                    assert_eq!(c.cache, cojoin::plugin::CacheOutcome::Hit);
                    started.elapsed()
                })
                .collect(),
        );
        // A rebuild whose functions are unchanged: the whole-component artifact gone, Cranelift's
        // per-function cache (filled by the compile above) kept.
        let from_functions = median(
            (0..3)
                .map(|_| {
                    for entry in std::fs::read_dir(cache.path()).unwrap().flatten() {
                        if entry.path().extension().is_some_and(|e| e == "cwasm") {
                            std::fs::remove_file(entry.path()).unwrap();
                        }
                    }
                    let e = engine(Some(cache.path().to_owned()));
                    let started = Instant::now();
                    let c = e.compile(file, &bytes).unwrap();
                    assert_eq!(c.cache, cojoin::plugin::CacheOutcome::Compiled);
                    started.elapsed()
                })
                .collect(),
        );
        let registry = PluginRegistry::from_file(
            warm.clone(),
            &plugin_path(file),
            PluginLimits::default(),
            vec![],
        )
        .unwrap();
        let version = registry.current();
        let instantiate = median(
            (0..RUNS * 4)
                .map(|_| {
                    let started = Instant::now();
                    version.instantiate().unwrap();
                    started.elapsed()
                })
                .collect(),
        );
        let ready = median(
            (0..RUNS)
                .map(|_| {
                    let e = engine(Some(cache.path().to_owned()));
                    let started = Instant::now();
                    let r = PluginRegistry::new(e, file, PluginLimits::default(), vec![], &bytes)
                        .unwrap();
                    let mut w = r.handle().unwrap();
                    w.on_match(a.key_bytes(), &a, &b).unwrap();
                    started.elapsed()
                })
                .collect(),
        );
        println!(
            "| {label} | {:.1} MB | {} | {} | {} | {} | {} |",
            bytes.len() as f64 / 1e6,
            fmt(cold),
            fmt(from_functions),
            fmt(cached),
            fmt(instantiate),
            fmt(ready)
        );
    }
}
