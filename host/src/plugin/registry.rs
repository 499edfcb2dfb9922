//! Hot swap: the registry holds the current version of one plugin and replaces it atomically; each
//! worker holds a `PluginHandle` that switches to the newest version between calls.
//!
//! A load compiles, links and validates (instantiate + `init`) before publishing, so a broken file
//! never replaces a working one. Before publishing it also instantiates one instance per worker and
//! leaves it in that worker's slot, so the first call after a swap does not pay for instantiation.
//! A call runs start to finish on the instance it began on: a swap never interrupts, loses or repeats
//! a call.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use super::engine::PluginEngine;
use super::error::{CallError, LoadError};
use super::instance::{BatchResults, PluginInstance, PluginVersion};
use super::limits::PluginLimits;
use crate::event::{Call, Event, OutputRecord, Side};

pub struct PluginRegistry {
    engine: Arc<PluginEngine>,
    name: String,
    limits: PluginLimits,
    config: Arc<[(String, String)]>,
    current: RwLock<Arc<PluginVersion>>,
    /// Mirrors `current.generation`, so workers can check for a swap without taking the lock.
    generation: AtomicU64,
    /// Serializes loads, so generations are handed out in publication order.
    loading: Mutex<()>,
    /// Slots of the live workers, for instances prepared ahead of a swap.
    slots: Mutex<Vec<Weak<StagedSlot>>>,
    /// The instance that validated the first version, kept for the first worker.
    spare: StagedSlot,
}

/// An instance of a newer version, prepared by a load for one worker.
type StagedSlot = Mutex<Option<PluginInstance>>;

impl PluginRegistry {
    /// Loads the first version. Blocking (compiles): run it off the async runtime.
    pub fn new(
        engine: Arc<PluginEngine>,
        name: &str,
        limits: PluginLimits,
        config: Vec<(String, String)>,
        bytes: &[u8],
    ) -> Result<Arc<Self>, LoadError> {
        let config: Arc<[(String, String)]> = config.into();
        let compiled = engine.compile(name, bytes)?;
        let version = Arc::new(PluginVersion::link(
            &engine,
            name,
            1,
            compiled,
            limits.clone(),
            config.clone(),
        )?);
        let validated = version.instantiate()?;
        log_published(&version);
        Ok(Arc::new(PluginRegistry {
            engine,
            name: name.to_owned(),
            limits,
            config,
            current: RwLock::new(version),
            generation: AtomicU64::new(1),
            loading: Mutex::new(()),
            slots: Mutex::new(Vec::new()),
            spare: Mutex::new(Some(validated)),
        }))
    }

    /// Like [`PluginRegistry::new`], reading the component from a file named after the plugin.
    pub fn from_file(
        engine: Arc<PluginEngine>,
        path: &Path,
        limits: PluginLimits,
        config: Vec<(String, String)>,
    ) -> Result<Arc<Self>, LoadError> {
        let bytes = read(path)?;
        Self::new(engine, &plugin_name(path), limits, config, &bytes)
    }

    pub fn current(&self) -> Arc<PluginVersion> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Loads `bytes` as the next version and publishes it once it has passed validation. Returns
    /// the version now current: the same one when `bytes` is what already runs. On error nothing
    /// changes. Blocking (compiles): run it off the async runtime.
    pub fn swap(&self, bytes: &[u8]) -> Result<Arc<PluginVersion>, LoadError> {
        self.swap_named(bytes, &self.name)
    }

    /// [`swap`](Self::swap), naming the new version `name` (its file or upload name), so that
    /// `/plugins`, labels and refusals say which plugin this is.
    pub fn swap_named(&self, bytes: &[u8], name: &str) -> Result<Arc<PluginVersion>, LoadError> {
        let _serial = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current();
        let compiled = self.engine.compile(name, bytes)?;
        if compiled.sha256 == current.sha256 {
            return Ok(current);
        }
        let version = Arc::new(PluginVersion::link(
            &self.engine,
            name,
            current.generation + 1,
            compiled,
            self.limits.clone(),
            self.config.clone(),
        )?);
        if version.is_n_way() != current.is_n_way() {
            return Err(LoadError::WrongWorld {
                plugin: version.label.to_string(),
                message: format!(
                    "it is of world {}, the running version of world {}: the join's topic count \
                     decides the world (two topics: `plugin`; three or more: `plugin-n`); \
                     build it against that world",
                    world_name(&version),
                    world_name(&current)
                ),
            });
        }
        // Validation: the first instance proves the version starts, and serves the first worker.
        let mut validated = Some(version.instantiate()?);
        for slot in self.live_slots() {
            let instance = match validated.take() {
                Some(instance) => instance,
                None => version.instantiate()?,
            };
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(instance);
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = version.clone();
        self.generation.store(version.generation, Ordering::Release);
        log_published(&version);
        Ok(version)
    }

    /// Refuses a plugin whose world does not fit a join of `topics` topics.
    pub fn check_world(&self, topics: usize) -> Result<(), LoadError> {
        let current = self.current();
        if current.is_n_way() == (topics > 2) {
            return Ok(());
        }
        let needed = if topics > 2 { "plugin-n" } else { "plugin" };
        Err(LoadError::WrongWorld {
            plugin: current.label.to_string(),
            message: format!(
                "it is of world {}, and a join of {topics} topics takes a plugin of world \
                 `{needed}` (cojoin plugin new --help shows both)",
                world_name(&current)
            ),
        })
    }

    fn live_slots(&self) -> Vec<Arc<StagedSlot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|w| w.strong_count() > 0);
        slots.iter().filter_map(Weak::upgrade).collect()
    }

    /// A handle for one worker, with its own instance of the current version.
    pub fn handle(self: &Arc<Self>) -> Result<PluginHandle, LoadError> {
        let slot = Arc::new(StagedSlot::default());
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&slot));
        let current = self.current();
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).take();
        let instance = match spare {
            Some(instance) if instance.version().generation == current.generation => instance,
            _ => current.instantiate()?,
        };
        Ok(PluginHandle {
            registry: self.clone(),
            slot,
            instance,
        })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|error| LoadError::Read {
        path: path.to_owned(),
        error,
    })
}

/// `plugins/order_paid.wasm` is the plugin `order_paid`.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".to_owned())
}

fn log_published(version: &PluginVersion) {
    tracing::info!(
        plugin = &*version.label,
        generation = version.generation,
        sha256 = %version.sha256,
        cache = ?version.compiled.cache,
        compile_ms = version.compiled.compile_time.as_millis() as u64,
        "plugin version published"
    );
}

fn world_name(version: &PluginVersion) -> &'static str {
    if version.is_n_way() {
        "`plugin-n`"
    } else {
        "`plugin`"
    }
}

/// One worker's access to the plugin: calls go to its own instance; between calls it moves to the
/// newest published version. Generations only move forward.
pub struct PluginHandle {
    registry: Arc<PluginRegistry>,
    slot: Arc<StagedSlot>,
    instance: PluginInstance,
}

impl PluginHandle {
    /// The version that answered the last call (and will answer the next, unless a swap lands).
    pub fn version(&self) -> &Arc<PluginVersion> {
        self.instance.version()
    }

    /// Fresh instances started after traps, on the current version.
    pub fn restarts(&self) -> u64 {
        self.instance.restarts()
    }

    /// Times the current instance was recycled for its size (not a failure).
    pub fn recycles(&self) -> u64 {
        self.instance.recycles()
    }

    /// Linear memory of the worker's instance, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.instance.memory_bytes()
    }

    pub fn on_match(
        &mut self,
        key: &[u8],
        a: &Event,
        b: &Event,
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.follow_swaps();
        self.instance.on_match(key, a, b)
    }

    pub fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.follow_swaps();
        self.instance.on_expire(key, event, side)
    }

    pub fn on_match_n(
        &mut self,
        key: &[u8],
        events: &[Arc<Event>],
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.follow_swaps();
        self.instance.on_match_n(key, events)
    }

    pub fn on_expire_n(
        &mut self,
        key: &[u8],
        event: &Event,
        partners: &[Vec<Arc<Event>>],
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.follow_swaps();
        self.instance.on_expire_n(key, event, partners)
    }

    /// How many calls to make at once ([`PluginInstance::batch_limit`]).
    pub fn batch_limit(&self) -> usize {
        self.instance.batch_limit()
    }

    /// Calls `on-batch` ([`PluginInstance::on_batch`]); `None` when the version now answering
    /// has no such export.
    pub fn on_batch(&mut self, calls: &[Call<'_>]) -> Option<Result<BatchResults, CallError>> {
        self.follow_swaps();
        self.instance.on_batch(calls)
    }

    fn follow_swaps(&mut self) {
        if self.registry.generation.load(Ordering::Acquire) == self.instance.version().generation {
            return;
        }
        let current = self.registry.current();
        if current.generation <= self.instance.version().generation {
            return;
        }
        let staged = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        match staged {
            Some(instance) if instance.version().generation == current.generation => {
                self.instance = instance;
            }
            // Prepared for a version already superseded, or none prepared (the worker joined
            // during the load): start one now. If it cannot start, keep the working instance.
            _ => match current.instantiate() {
                Ok(instance) => self.instance = instance,
                Err(e) => tracing::error!(
                    plugin = &*current.label,
                    "cannot instantiate the new plugin version, staying on generation {}: {e}",
                    self.instance.version().generation
                ),
            },
        }
    }
}

impl std::fmt::Debug for PluginRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegistry")
            .field("name", &self.name)
            .field("current", &self.current())
            .finish_non_exhaustive()
    }
}
