//! A loaded plugin version (`PluginVersion`: compiled, linked, ready to instantiate) and a live
//! instance of it (`PluginInstance`: one store, reused across calls, rebuilt after a trap).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use wasmtime::component::{ComponentExportIndex, Func, InstancePre};
use wasmtime::{Store, Trap};

use super::bindings::{
    self, multi, wit, OnBatchParams, OnBatchResults, PluginBindings, PluginBindingsIndices,
};
use super::engine::{CompiledPlugin, PluginEngine};
use super::error::{CallError, LoadError, TrapKind};
use super::limits::{MemoryCapExceeded, PluginLimits};
use super::sandbox::{SleepPastDeadline, StoreState};
use crate::event::{Call, Event, OutputRecord, Side};

/// The most calls one `on-batch` call takes: past a few dozen the per-call entry it saves is
/// already small against the calls themselves.
pub const MAX_BATCH: usize = 32;

/// What each call of a batch returned: its records, or the plugin's error message.
pub type BatchResults = Vec<Result<Vec<OutputRecord>, String>>;

/// One version of a plugin, as published by the registry.
pub struct PluginVersion {
    /// The plugin's name (from its file name or the config).
    pub name: String,
    /// Increases by one with every version a registry publishes.
    pub generation: u64,
    /// Hex sha256 of the component bytes.
    pub sha256: String,
    pub loaded_at: SystemTime,
    /// `name@` + the first 12 hex digits of the sha256; tags logs and errors.
    pub label: Arc<str>,
    pub compiled: CompiledInfo,
    instance_pre: InstancePre<StoreState>,
    exports: Exports,
    engine: Arc<PluginEngine>,
    limits: PluginLimits,
    config: Arc<[(String, String)]>,
}

/// The component's world, and the exports the host calls.
enum Exports {
    /// World `plugin` (or `plugin-batched`): a two-topic join's calls.
    Pair {
        indices: PluginBindingsIndices,
        /// The `on-batch` export (world `plugin-batched`), when the component has it.
        on_batch: Option<ComponentExportIndex>,
    },
    /// World `plugin-n`: a join of three topics or more (`on-batch-n` is part of it).
    Multi(multi::PluginNIndices),
}

/// An instance's exports, bound.
enum Bound {
    Pair {
        bindings: PluginBindings,
        /// `on-batch`, type-checked at start.
        on_batch: Option<Func>,
    },
    Multi(multi::PluginN),
}

/// How the version's code was obtained, for logs and the admin API.
#[derive(Clone, Copy, Debug)]
pub struct CompiledInfo {
    pub cache: super::CacheOutcome,
    pub compile_time: std::time::Duration,
}

impl PluginVersion {
    /// Links a compiled component against the host's world. Fails when the component imports
    /// something the host does not provide or lacks an export.
    pub(crate) fn link(
        engine: &Arc<PluginEngine>,
        name: &str,
        generation: u64,
        compiled: CompiledPlugin,
        limits: PluginLimits,
        config: Arc<[(String, String)]>,
    ) -> Result<Self, LoadError> {
        let wrong_world = |e: wasmtime::Error| LoadError::WrongWorld {
            plugin: name.to_owned(),
            message: format!("{e:#}"),
        };
        let instance_pre = engine
            .linker
            .instantiate_pre(&compiled.component)
            .map_err(wrong_world)?;
        let n_way = compiled
            .component
            .get_export_index(None, bindings::ON_MATCH_N)
            .is_some();
        let exports = if n_way {
            Exports::Multi(multi::PluginNIndices::new(&instance_pre).map_err(wrong_world)?)
        } else {
            Exports::Pair {
                indices: PluginBindingsIndices::new(&instance_pre).map_err(wrong_world)?,
                on_batch: compiled
                    .component
                    .get_export_index(None, bindings::ON_BATCH),
            }
        };
        let label: Arc<str> = format!("{name}@{}", &compiled.sha256[..12]).into();
        let config = if compiled.embedded_config.is_empty() {
            config
        } else {
            compiled
                .embedded_config
                .iter()
                .chain(config.iter())
                .cloned()
                .collect()
        };
        Ok(PluginVersion {
            name: name.to_owned(),
            generation,
            sha256: compiled.sha256,
            loaded_at: SystemTime::now(),
            label,
            compiled: CompiledInfo {
                cache: compiled.cache,
                compile_time: compiled.compile_time,
            },
            instance_pre,
            exports,
            engine: engine.clone(),
            limits,
            config,
        })
    }

    /// Whether the component takes calls in batches (it exports `on-batch`, or is of world
    /// `plugin-n`, which has `on-batch-n`).
    pub fn batches(&self) -> bool {
        match &self.exports {
            Exports::Pair { on_batch, .. } => on_batch.is_some(),
            Exports::Multi(_) => true,
        }
    }

    /// Whether the component is of world `plugin-n`: it serves joins of three topics or more
    /// (`on-match-n`), and no two-topic join.
    pub fn is_n_way(&self) -> bool {
        matches!(self.exports, Exports::Multi(_))
    }

    /// Instantiates and runs `init`.
    pub fn instantiate(self: &Arc<Self>) -> Result<PluginInstance, LoadError> {
        let live = self.start()?;
        Ok(PluginInstance {
            version: self.clone(),
            live: Some(live),
            restarts: 0,
            recycles: 0,
            a: bindings::empty_event(),
            b: bindings::empty_event(),
            calls: Vec::new(),
            pace: None,
        })
    }

    fn start(&self) -> Result<Live, LoadError> {
        let state = StoreState::new(self.label.clone(), self.limits.memory_bytes);
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.engine.ticks(self.limits.init_deadline));
        store.data_mut().call_deadline = Some(Instant::now() + self.limits.init_deadline);
        if self.engine.options.fuel {
            // Fuel limits calls, not start-up, which the init deadline already bounds.
            store
                .set_fuel(u64::MAX)
                .expect("fuel is enabled on this engine");
        }
        let started = |e: wasmtime::Error| LoadError::Start {
            plugin: self.label.to_string(),
            error: classify(&self.label, e),
        };
        let instance = self.instance_pre.instantiate(&mut store).map_err(started)?;
        let (indices, on_batch) = match &self.exports {
            Exports::Pair { indices, on_batch } => (indices, on_batch),
            Exports::Multi(indices) => {
                let bindings = indices.load(&mut store, &instance).map_err(started)?;
                let init = bindings.call_init(&mut store, &self.config);
                return self.started(store, Bound::Multi(bindings), init, started);
            }
        };
        let bindings = indices.load(&mut store, &instance).map_err(started)?;
        let on_batch = match on_batch {
            Some(index) => {
                let wrong_type = |message: String| LoadError::WrongWorld {
                    plugin: self.label.to_string(),
                    message: format!(
                        "its `{}` export is not cojoin:plugin/plugin-batched's: {message} \
                         (build it against the WIT of this host, or drop the export)",
                        bindings::ON_BATCH
                    ),
                };
                let func = instance
                    .get_func(&mut store, index)
                    .ok_or_else(|| wrong_type("not a function".to_owned()))?;
                func.typed::<OnBatchParams<'_>, OnBatchResults>(&store)
                    .map_err(|e| wrong_type(format!("{e:#}")))?;
                Some(func)
            }
            None => None,
        };
        let init = bindings.call_init(&mut store, &self.config);
        self.started(store, Bound::Pair { bindings, on_batch }, init, started)
    }

    /// The instance `init` was called on, or why it may not serve.
    fn started(
        &self,
        store: Store<StoreState>,
        bound: Bound,
        init: wasmtime::Result<Result<(), String>>,
        started: impl Fn(wasmtime::Error) -> LoadError,
    ) -> Result<Live, LoadError> {
        match init {
            Ok(Ok(())) => {
                let recycle_above = self.limits.recycle_above(store.data().limiter.used());
                Ok(Live {
                    store,
                    bound,
                    recycle_above,
                })
            }
            Ok(Err(message)) => Err(LoadError::Init {
                plugin: self.label.to_string(),
                message,
            }),
            Err(e) => Err(started(e)),
        }
    }
}

struct Live {
    store: Store<StoreState>,
    bound: Bound,
    /// Past this much linear memory the instance is replaced before its next call.
    recycle_above: usize,
}

/// A live instance serving one worker's calls, one at a time.
pub struct PluginInstance {
    version: Arc<PluginVersion>,
    /// `None` after a trap: the next call instantiates afresh.
    live: Option<Live>,
    /// Times a trapped instance was replaced by a fresh one.
    restarts: u64,
    /// Times an instance grown past its recycling size was replaced (not a failure).
    recycles: u64,
    // Reused argument buffers: see `bindings::fill_event`.
    a: wit::Event,
    b: wit::Event,
    calls: Vec<wit::Call>,
    /// Time per call, averaged over the last calls (kept only for a component that batches):
    /// sizes the next batch.
    pace: Option<Duration>,
}

impl PluginInstance {
    pub fn version(&self) -> &Arc<PluginVersion> {
        &self.version
    }

    /// How many times a trapped instance was replaced by a fresh one.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// How many times an instance that had grown too large was replaced by a fresh one.
    pub fn recycles(&self) -> u64 {
        self.recycles
    }

    /// Linear memory of the live instance, in bytes (0 when none is live).
    pub fn memory_bytes(&self) -> usize {
        self.live
            .as_ref()
            .map_or(0, |live| live.store.data().limiter.used())
    }

    /// Calls `on-match(key, a, b)`.
    pub fn on_match(
        &mut self,
        key: &[u8],
        a: &Event,
        b: &Event,
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.two_topic_call("on-match")?;
        bindings::fill_event(&mut self.a, a);
        bindings::fill_event(&mut self.b, b);
        self.prepare_call(1)?;
        let started = self.version.batches().then(Instant::now);
        let live = self.live.as_mut().expect("prepared");
        let Bound::Pair { bindings, .. } = &live.bound else {
            unreachable!("a two-topic version's instance")
        };
        let result = bindings.call_on_match(&mut live.store, key, &self.a, &self.b);
        self.note_pace(started, 1);
        self.finish(result)
    }

    /// Calls `on-expire(key, event, side)`.
    pub fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.two_topic_call("on-expire")?;
        bindings::fill_event(&mut self.a, event);
        self.prepare_call(1)?;
        let started = self.version.batches().then(Instant::now);
        let live = self.live.as_mut().expect("prepared");
        let Bound::Pair { bindings: b, .. } = &live.bound else {
            unreachable!("a two-topic version's instance")
        };
        let result = b.call_on_expire(&mut live.store, key, &self.a, bindings::side(side));
        self.note_pace(started, 1);
        self.finish(result)
    }

    /// How many calls the next batch should take: as many as fit in an eighth of the call
    /// deadline at the pace of the last calls (a batch has one call's deadline), at most
    /// [`MAX_BATCH`]; 1 (no batches) for a component without `on-batch`.
    pub fn batch_limit(&self) -> usize {
        if !self.version.batches() {
            return 1;
        }
        // The first call is made alone, to learn the pace.
        let Some(pace) = self.pace else {
            return 1;
        };
        let room = self.version.limits.deadline / 8;
        (room.as_nanos() / pace.as_nanos().max(1)).clamp(1, MAX_BATCH as u128) as usize
    }

    /// Calls `on-batch` with `calls`: `None` when the component has no such export. A trap, or
    /// an answer with a result count other than the calls', fails the whole batch.
    pub fn on_batch(&mut self, calls: &[Call<'_>]) -> Option<Result<BatchResults, CallError>> {
        if self.version.is_n_way() {
            return Some(self.on_batch_n(calls));
        }
        if !self.version.batches() {
            return None;
        }
        bindings::fill_calls(&mut self.calls, calls);
        if let Err(e) = self.prepare_call(calls.len() as u64) {
            return Some(Err(e));
        }
        let live = self.live.as_mut().expect("prepared");
        let Bound::Pair {
            on_batch: Some(func),
            ..
        } = live.bound
        else {
            unreachable!("an instance of a version with on-batch has it")
        };
        // Type-checked per batch (and once at start, to refuse a wrong export early) rather than
        // trusted with `new_unchecked`: the check walks the export's type, beside a batch of
        // calls into Python or JS (0.3 ms and more) too small to measure.
        let typed = match func.typed::<OnBatchParams<'_>, OnBatchResults>(&live.store) {
            Ok(typed) => typed,
            Err(e) => {
                return Some(Err(CallError::Plugin {
                    plugin: self.version.label.to_string(),
                    message: format!("its on-batch export changed type: {e:#}"),
                }))
            }
        };
        let started = Instant::now();
        let result = typed.call(&mut live.store, (&self.calls[..],));
        self.note_pace(Some(started), calls.len());
        Some(match result {
            Ok((outcomes,)) if outcomes.len() == calls.len() => Ok(outcomes
                .into_iter()
                .map(|o| o.map(bindings::outputs))
                .collect()),
            Ok((outcomes,)) => Err(CallError::Plugin {
                plugin: self.version.label.to_string(),
                message: format!(
                    "on-batch returned {} results for {} calls",
                    outcomes.len(),
                    calls.len()
                ),
            }),
            Err(e) => Err(self.trapped(e)),
        })
    }

    /// Folds the time of the call(s) started at `started` into the pace.
    fn note_pace(&mut self, started: Option<Instant>, calls: usize) {
        let Some(started) = started else { return };
        let per_call = started.elapsed() / calls.max(1) as u32;
        self.pace = Some(match self.pace {
            Some(pace) => (pace * 7 + per_call) / 8,
            None => per_call,
        });
    }

    /// Arms the deadline (and fuel) of the next call, instantiating first if the last call trapped
    /// or the instance has grown past its recycling size.
    fn prepare_call(&mut self, calls: u64) -> Result<(), CallError> {
        if let Some(live) = &self.live {
            let used = live.store.data().limiter.used();
            if used > live.recycle_above {
                // A fresh instance costs milliseconds; one grown to its cap fails a call.
                match self.version.start() {
                    Ok(fresh) => {
                        tracing::debug!(
                            plugin = &*self.version.label,
                            memory_bytes = used,
                            "instance recycled: it had grown past {} bytes",
                            live.recycle_above
                        );
                        self.live = Some(fresh);
                        self.recycles += 1;
                    }
                    Err(e) => tracing::warn!(
                        plugin = &*self.version.label,
                        "could not start a fresh instance to replace one of {used} bytes; keeping it: {e}"
                    ),
                }
            }
        }
        if self.live.is_none() {
            let live = self.version.start().map_err(|e| CallError::Unavailable {
                plugin: self.version.label.to_string(),
                message: e.to_string(),
            })?;
            self.live = Some(live);
            self.restarts += 1;
        }
        let live = self.live.as_mut().expect("instantiated above");
        let limits = &self.version.limits;
        live.store
            .set_epoch_deadline(self.version.engine.ticks(limits.deadline));
        live.store.data_mut().call_deadline = Some(Instant::now() + limits.deadline);
        live.store.data().take_stderr_tail();
        if self.version.engine.options.fuel {
            // A batch gets the fuel of its calls.
            let fuel = limits.fuel.map_or(u64::MAX, |f| f.saturating_mul(calls));
            live.store
                .set_fuel(fuel)
                .expect("fuel is enabled on this engine");
        }
        Ok(())
    }

    fn finish(
        &mut self,
        result: wasmtime::Result<Result<Vec<wit::OutputRecord>, String>>,
    ) -> Result<Vec<OutputRecord>, CallError> {
        match result {
            Ok(Ok(records)) => Ok(bindings::outputs(records)),
            Ok(Err(message)) => Err(CallError::Plugin {
                plugin: self.version.label.to_string(),
                message,
            }),
            Err(e) => Err(self.trapped(e)),
        }
    }

    /// The error of a trapped call. A trapped instance may be in any state: it is dropped, never
    /// called into again.
    fn trapped(&mut self, e: wasmtime::Error) -> CallError {
        let stderr = self
            .live
            .take()
            .map(|live| live.store.data().take_stderr_tail())
            .unwrap_or_default();
        let mut error = classify(&self.version.label, e);
        // A panic's own text goes to stderr before the trap: without it the dead letter only
        // said "wasm `unreachable` instruction executed".
        if let CallError::Trap {
            kind: TrapKind::Crash,
            message,
            ..
        } = &mut error
        {
            if !stderr.is_empty() {
                message.push_str(&format!("; the plugin's stderr before the trap: {stderr}"));
            }
        }
        error
    }
}

/// Sorts a trap into timeout, memory or crash. The message is the root cause (the full chain,
/// with the Wasm backtrace, goes to the debug log).
fn classify(label: &str, error: wasmtime::Error) -> CallError {
    let kind = if error.downcast_ref::<MemoryCapExceeded>().is_some() {
        TrapKind::Memory
    } else if error.downcast_ref::<SleepPastDeadline>().is_some() {
        TrapKind::Timeout
    } else {
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => TrapKind::Timeout,
            Some(Trap::OutOfFuel) => TrapKind::Timeout,
            _ => TrapKind::Crash,
        }
    };
    tracing::debug!(
        plugin = label,
        kind = kind.as_str(),
        "plugin trap: {error:?}"
    );
    let message = match kind {
        TrapKind::Timeout if error.downcast_ref::<SleepPastDeadline>().is_some() => {
            error.root_cause().to_string()
        }
        TrapKind::Timeout => format!(
            "{} (the call exceeded its deadline or fuel)",
            error.root_cause()
        ),
        _ => error.root_cause().to_string(),
    };
    CallError::Trap {
        plugin: label.to_owned(),
        kind,
        message,
    }
}

mod multi_calls;

impl std::fmt::Debug for PluginVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginVersion")
            .field("name", &self.name)
            .field("generation", &self.generation)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}
