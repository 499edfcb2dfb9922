//! Loading: the compile cache, and broken files refused with a clear error.

use cojoin::plugin::{
    CacheOutcome, EngineOptions, LoadError, PluginEngine, PluginLimits, PluginRegistry,
};

use super::{engine, event, plugin_path, registry};

fn load(
    bytes: &[u8],
    config: Vec<(String, String)>,
) -> Result<std::sync::Arc<PluginRegistry>, LoadError> {
    PluginRegistry::new(
        engine(),
        "candidate",
        PluginLimits::default(),
        config,
        bytes,
    )
}

#[test]
fn garbage_is_refused_as_not_webassembly() {
    let err = load(b"definitely not wasm", vec![]).unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
    assert!(err.to_string().contains("not a WebAssembly file"), "{err}");
}

#[test]
fn a_core_module_is_refused_with_the_fix() {
    // The smallest core module: magic and version 1, no sections.
    let err = load(b"\0asm\x01\0\0\0", vec![]).unwrap_err();
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
}

#[test]
fn a_truncated_component_is_refused() {
    let bytes = std::fs::read(plugin_path("order_paid_rust.wasm")).unwrap();
    let err = load(&bytes[..bytes.len() / 2], vec![]).unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err}");
}

#[test]
fn a_component_of_another_world_is_refused() {
    let bytes = std::fs::read(plugin_path("not_a_plugin.wasm")).unwrap();
    let err = load(&bytes, vec![]).unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err}");
    assert!(err.to_string().contains("cojoin:plugin@0.1.0"), "{err}");
}

#[test]
fn a_failing_init_is_refused_with_its_message() {
    let bytes = std::fs::read(plugin_path("misbehave.wasm")).unwrap();
    let err = load(&bytes, vec![("fail-init".into(), "yes".into())]).unwrap_err();
    assert!(matches!(err, LoadError::Init { .. }), "{err}");
    assert!(err.to_string().contains("fail-init = yes"), "{err}");
}

#[test]
fn a_compiled_component_is_cached_on_disk_and_a_corrupt_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(plugin_path("order_paid_rust.wasm")).unwrap();
    let fresh_engine = || {
        PluginEngine::new(EngineOptions {
            cache_dir: Some(dir.path().to_owned()),
            ..EngineOptions::default()
        })
        .unwrap()
    };
    assert_eq!(
        fresh_engine().compile("p", &bytes).unwrap().cache,
        CacheOutcome::Compiled
    );
    assert_eq!(
        fresh_engine().compile("p", &bytes).unwrap().cache,
        CacheOutcome::Hit
    );

    let cwasm = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .collect::<Vec<_>>()
    };
    for path in cwasm() {
        std::fs::write(path, b"corrupt").unwrap();
    }
    let compiled = fresh_engine().compile("p", &bytes).unwrap();
    assert_eq!(compiled.cache, CacheOutcome::Compiled);
    assert_eq!(
        fresh_engine().compile("p", &bytes).unwrap().cache,
        CacheOutcome::Hit
    );

    // The per-function cache (functions/) corrupt too: compiled again, and the code works.
    let mut corrupted = 0;
    let mut dirs = vec![dir.path().join("functions")];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                std::fs::write(path, b"corrupt").unwrap();
                corrupted += 1;
            }
        }
    }
    assert!(
        corrupted > 10,
        "the function cache holds the plugin's functions"
    );
    for path in cwasm() {
        std::fs::remove_file(path).unwrap();
    }
    let registry =
        PluginRegistry::new(fresh_engine(), "p", PluginLimits::default(), vec![], &bytes).unwrap();
    assert_eq!(registry.current().compiled.cache, CacheOutcome::Compiled);
    let (a, b) = (
        event("orders", "order-1", 1),
        event("payments", "order-1", 2),
    );
    let out = registry
        .handle()
        .unwrap()
        .on_match(a.key_bytes(), &a, &b)
        .unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn an_engine_with_other_settings_does_not_use_the_cached_code() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(plugin_path("noop.wasm")).unwrap();
    let engine = |fuel| {
        PluginEngine::new(EngineOptions {
            cache_dir: Some(dir.path().to_owned()),
            fuel,
            ..EngineOptions::default()
        })
        .unwrap()
    };
    assert_eq!(
        engine(false).compile("p", &bytes).unwrap().cache,
        CacheOutcome::Compiled
    );
    assert_eq!(
        engine(true).compile("p", &bytes).unwrap().cache,
        CacheOutcome::Compiled
    );
    assert_eq!(
        engine(true).compile("p", &bytes).unwrap().cache,
        CacheOutcome::Hit
    );
}

#[test]
fn a_missing_file_names_the_path() {
    let err = PluginRegistry::from_file(
        engine(),
        std::path::Path::new("/nonexistent/plugin.wasm"),
        PluginLimits::default(),
        vec![],
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/plugin.wasm"),
        "{err}"
    );
    // The registry helper keeps working for valid files.
    let _ = registry("noop.wasm", PluginLimits::default(), &[]);
}
