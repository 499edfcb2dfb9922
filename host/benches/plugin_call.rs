//! The cost of one `on-match` call per plugin language (criterion), with 100-byte values: the
//! host's copy of both events into the guest, the call, and reading the returned records back.
//! Needs the built plugins (`make plugins`); run with `make bench`. `on_batch`: the same call in
//! batches of 32 (`on-batch`, for the plugins that export it), per call.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[path = "../tests/support/mod.rs"]
mod support;
use support::{event_100b, plugin_path, BENCH_PLUGINS};

use cojoin::event::Call;
use cojoin::plugin::{EngineOptions, PluginEngine, PluginHandle, PluginLimits, PluginRegistry};

/// A worker of the plugin `file` with the default limits.
fn worker(engine: &Arc<PluginEngine>, file: &str) -> PluginHandle {
    PluginRegistry::from_file(
        engine.clone(),
        &plugin_path(file),
        PluginLimits::default(),
        vec![],
    )
    .unwrap()
    .handle()
    .unwrap()
}

fn on_match(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(EngineOptions {
        cache_dir: Some(cache.path().to_owned()),
        ..EngineOptions::default()
    })
    .unwrap();
    let (a, b) = (
        event_100b("orders", "order-000123"),
        event_100b("payments", "order-000123"),
    );
    let mut g = c.benchmark_group("on_match");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(4));
    for (label, file) in BENCH_PLUGINS {
        let mut worker = worker(&engine, file);
        g.bench_function(label, |bench| {
            bench.iter(|| worker.on_match(a.key_bytes(), &a, &b).unwrap())
        });
    }
    g.finish();

    const BATCH: usize = 32;
    let call = Call::Match {
        key: a.key_bytes(),
        left: &a,
        right: &b,
    };
    let calls = vec![call; BATCH];
    let mut g = c.benchmark_group("on_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(4));
    for (label, file) in BENCH_PLUGINS {
        let mut worker = worker(&engine, file);
        if worker.on_batch(&calls).is_none() {
            continue; // no on-batch export
        }
        g.bench_function(label, |bench| {
            bench.iter(|| worker.on_batch(&calls).unwrap().unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, on_match);
criterion_main!(benches);
