//! Plugin runtime tests against real components built by `make plugins` (Rust, Python, JS and the
//! `misbehave` fixture). One test binary; helpers below.

mod admin;
mod batch;
mod languages;
mod leak;
mod loading;
mod n_way;
mod sandbox;
#[path = "../support/mod.rs"]
mod support;
mod swap;

pub use support::plugin_path;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cojoin::event::{Event, OutputRecord};
use cojoin::plugin::{EngineOptions, PluginEngine, PluginLimits, PluginRegistry};

pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache")
}

/// One engine for the whole test binary, with the compile cache: a Python component compiles once.
pub fn engine() -> Arc<PluginEngine> {
    static ENGINE: OnceLock<Arc<PluginEngine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            PluginEngine::new(EngineOptions {
                cache_dir: Some(cache_dir()),
                ..EngineOptions::default()
            })
            .expect("plugin engine")
        })
        .clone()
}

pub fn registry(file: &str, limits: PluginLimits, config: &[(&str, &str)]) -> Arc<PluginRegistry> {
    let config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    PluginRegistry::from_file(engine(), &plugin_path(file), limits, config)
        .unwrap_or_else(|e| panic!("loading {file}: {e}"))
}

/// An event with a 100-byte JSON value.
pub fn event(topic: &str, key: &str, offset: i64) -> Event {
    let value = format!(
        "{{\"id\":\"{key}\",\"amount\":42.5,\"pad\":\"{}\"}}",
        "x".repeat(52)
    );
    Event {
        topic: topic.into(),
        partition: 3,
        offset,
        timestamp: 1_764_680_400_000 + offset,
        key: Some(key.as_bytes().to_vec().into()),
        value: Some(value.into_bytes().into()),
        headers: Box::default(),
    }
}

/// The JSON body of an output record.
pub fn body(record: &OutputRecord) -> serde_json::Value {
    serde_json::from_slice(record.value.as_deref().expect("a value")).expect("JSON value")
}
