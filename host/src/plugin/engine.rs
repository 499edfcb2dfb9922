//! The one wasmtime `Engine` of a host, its linker (WASI p2 + `cojoin:plugin/host`), the compile
//! caches (whole components, and functions), and the epoch ticker that enforces call deadlines.

use crate::stoppable::StoppableThread;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::PluginBindings;
use super::cache::{CacheOutcome, CompileCache};
use super::error::LoadError;
use super::function_cache::FunctionCache;
use super::sandbox::StoreState;

/// Default of [`EngineOptions::cache_max_bytes`]: 4 GiB, room for dozens of Python plugin
/// versions.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// How the engine is built; fixed for the life of the host.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Directory of compiled components and functions; `None` compiles every load. Used only
    /// while it and its entries belong to this process's user and nobody else can write them
    /// (see [`super::cache`]); created with mode 0700 when missing.
    pub cache_dir: Option<PathBuf>,
    /// Most bytes the cache directory may hold: half for whole compiled components, half for
    /// compiled functions; past its half, each evicts its least recently used entries.
    pub cache_max_bytes: u64,
    /// Turn on fuel metering so plugins may set a fuel limit (costs some speed for every plugin).
    pub fuel: bool,
    /// Granularity of call deadlines.
    pub epoch_tick: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            cache_dir: None,
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            fuel: false,
            epoch_tick: Duration::from_millis(5),
        }
    }
}

/// A component compiled for this engine.
pub struct CompiledPlugin {
    pub(crate) component: Component,
    pub sha256: String,
    /// Init config the component carries ([`super::embedded`]), passed before the host's.
    pub embedded_config: Vec<(String, String)>,
    pub cache: CacheOutcome,
    pub compile_time: Duration,
}

pub struct PluginEngine {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreState>,
    cache: Option<CompileCache>,
    pub(crate) options: EngineOptions,
    _ticker: EpochTicker,
}

impl PluginEngine {
    pub fn new(options: EngineOptions) -> Result<Arc<Self>, LoadError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.consume_fuel(options.fuel);
        // Half each: the caches are trimmed independently, so neither needs the other's sizes.
        let share = options.cache_max_bytes / 2;
        if let Some(dir) = &options.cache_dir {
            let functions = FunctionCache::new(dir, share).map_err(|e| {
                LoadError::Engine(format!(
                    "cannot create the compiled-function cache in {dir:?}: {e} (set another cache directory)"
                ))
            })?;
            config
                .enable_incremental_compilation(Arc::new(functions))
                .map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        }
        let engine = Engine::new(&config).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| LoadError::Engine(format!("linking WASI: {e:#}")))?;
        super::sandbox::bound_waits(&mut linker)
            .map_err(|e| LoadError::Engine(format!("bounding WASI waits: {e:#}")))?;
        PluginBindings::add_to_linker::<_, HasSelf<StoreState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Engine(format!("linking cojoin:plugin/host: {e:#}")))?;
        let cache = match &options.cache_dir {
            Some(dir) => Some(CompileCache::new(dir.clone(), &engine, share).map_err(|e| {
                LoadError::Engine(format!(
                    "cannot create the compiled-plugin cache {dir:?}: {e} (set another cache directory)"
                ))
            })?),
            None => None,
        };
        let ticker = EpochTicker::start(engine.clone(), options.epoch_tick);
        Ok(Arc::new(PluginEngine {
            engine,
            linker,
            cache,
            options,
            _ticker: ticker,
        }))
    }

    /// Compiles (or fetches from the cache) a component. Blocking and CPU-heavy: call it from a
    /// blocking thread, never from an async task.
    pub fn compile(&self, plugin: &str, bytes: &[u8]) -> Result<CompiledPlugin, LoadError> {
        check_header(plugin, bytes)?;
        let sha256 = hex::encode(Sha256::digest(bytes));
        let started = Instant::now();
        let embedded = super::embedded::split(bytes).map_err(|message| LoadError::Compile {
            plugin: plugin.to_owned(),
            message,
        })?;
        // The code without the embedded config, and its own hash for the compiled-code cache.
        let (code, code_sha, embedded_config) = match &embedded {
            Some(e) => (
                &e.code[..],
                hex::encode(Sha256::digest(&e.code)),
                e.config.clone(),
            ),
            None => (bytes, sha256.clone(), Vec::new()),
        };
        let result = match &self.cache {
            Some(cache) => cache.load(&self.engine, &code_sha, code),
            None => Component::new(&self.engine, code).map(|c| (c, CacheOutcome::Uncached)),
        };
        let (component, cache) = result.map_err(|e| LoadError::Compile {
            plugin: plugin.to_owned(),
            message: format!("{e:#}"),
        })?;
        Ok(CompiledPlugin {
            component,
            sha256,
            embedded_config,
            cache,
            compile_time: started.elapsed(),
        })
    }

    /// Deadline expressed in epoch ticks, rounded up, plus one because the current tick may be
    /// about to end.
    pub(crate) fn ticks(&self, deadline: Duration) -> u64 {
        let tick = self.options.epoch_tick.as_nanos().max(1);
        (deadline.as_nanos().div_ceil(tick) as u64).saturating_add(1)
    }
}

/// Catches the two common mistakes with a short message before the parser gives a long one.
fn check_header(plugin: &str, bytes: &[u8]) -> Result<(), LoadError> {
    let message = match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 0x0d, 0, 1, 0]) => return Ok(()),
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
            "it is a core WebAssembly module, not a component (wasm32-wasip1 or wasm32-unknown-unknown \
             output): build for wasm32-wasip2, or wrap it with `wasm-tools component new`"
        }
        _ => "it is not a WebAssembly file (it does not start with \\0asm)",
    };
    Err(LoadError::Compile {
        plugin: plugin.to_owned(),
        message: message.to_owned(),
    })
}

/// Advances the engine's epoch every tick; stops and joins when dropped.
struct EpochTicker(#[allow(dead_code)] StoppableThread);

impl EpochTicker {
    fn start(engine: Engine, tick: Duration) -> Self {
        EpochTicker(
            StoppableThread::spawn("cojoin-epoch", move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch ticker thread"),
        )
    }
}
