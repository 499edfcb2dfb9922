//! The plugin runtime: compiles, sandboxes, calls and hot-swaps `cojoin:plugin` components.
//!
//! Depends on wasmtime and on [`crate::event`], never on the Kafka side.
//!
//! - [`engine`]: the one `Engine`, its linker, compile cache and epoch ticker.
//! - [`instance`]: a linked version and its live, reusable instances; trap classification.
//! - [`registry`]: the current version of a plugin and atomic swaps; per-worker handles.
//! - [`sandbox`]: the store data: WASI granting nothing, the memory cap, logs.
//! - [`limits`]: deadline, memory cap and fuel.

mod bindings;
mod cache;
pub mod embedded;
pub mod engine;
pub mod error;
mod function_cache;
pub mod instance;
pub mod limits;
pub mod registry;
mod sandbox;

pub use cache::CacheOutcome;
pub use engine::{EngineOptions, PluginEngine, DEFAULT_CACHE_MAX_BYTES};
pub use error::{CallError, LoadError, TrapKind};
pub use instance::{PluginInstance, PluginVersion};
pub use limits::PluginLimits;
pub use registry::{plugin_name, PluginHandle, PluginRegistry};
