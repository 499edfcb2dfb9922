//! Per-plugin resource limits and the store limiter that enforces the memory cap.

use std::time::Duration;

use wasmtime::ResourceLimiter;

/// Limits applied to every instance of a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginLimits {
    /// Wall-clock budget of one `on-match` / `on-expire` call; past it the call traps with
    /// [`TrapKind::Timeout`](super::TrapKind::Timeout).
    pub deadline: Duration,
    /// Budget of instantiation plus `init`, which may be much slower than a call (a Python plugin
    /// imports its modules there).
    pub init_deadline: Duration,
    /// Cap on the linear memory of one instance, all memories together, in bytes.
    pub memory_bytes: usize,
    /// Optional fuel (roughly: Wasm instructions) per call. Needs an engine built with fuel on.
    pub fuel: Option<u64>,
}

/// An instance that has grown this much past its start-up size is replaced between calls.
const RECYCLE_GROWTH_MAX: usize = 64 << 20;

impl PluginLimits {
    /// Linear memory above which an instance that started at `start_bytes` is replaced by a fresh
    /// one before its next call: 64 MiB of growth, or three quarters of the room left under the
    /// cap if that is less. Some guests never give memory back (componentize-py 0.25 and
    /// componentize-js 0.23 leak what a call returns: ~2 KB a call for the order-paid plugin), so
    /// an instance would reach its cap and trap as `memory` on an innocent call.
    pub fn recycle_above(&self, start_bytes: usize) -> usize {
        let room = self.memory_bytes.saturating_sub(start_bytes);
        start_bytes + RECYCLE_GROWTH_MAX.min(room / 4 * 3)
    }
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            deadline: Duration::from_millis(500),
            init_deadline: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            fuel: None,
        }
    }
}

/// The error a denied memory growth traps with, so the trap can be told apart from a crash.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {cap} bytes reached: the plugin asked for {requested} bytes in all")]
pub struct MemoryCapExceeded {
    pub cap: usize,
    pub requested: usize,
}

/// Tracks the memory of one store against the cap. Growing past it traps (instead of letting
/// `memory.grow` return -1) so that the outcome is the same for every guest language: a Python
/// guest would otherwise turn it into a `MemoryError` and a Rust guest into an abort.
pub(crate) struct MemoryCap {
    cap: usize,
    used: usize,
}

impl MemoryCap {
    pub(crate) fn new(cap: usize) -> Self {
        MemoryCap { cap, used: 0 }
    }

    /// Bytes of linear memory the instance has grown to (memory never shrinks).
    pub(crate) fn used(&self) -> usize {
        self.used
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let requested = self.used - current.min(self.used) + desired;
        if requested > self.cap {
            return Err(wasmtime::Error::new(MemoryCapExceeded {
                cap: self.cap,
                requested,
            }));
        }
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.used = requested;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million entries is far beyond any real plugin.
        Ok(desired <= 1_000_000 && maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_recycled_well_before_its_cap() {
        let limits = PluginLimits {
            memory_bytes: 256 << 20,
            ..PluginLimits::default()
        };
        assert_eq!(limits.recycle_above(13 << 20), (13 + 64) << 20);
        let small = PluginLimits {
            memory_bytes: 32 << 20,
            ..PluginLimits::default()
        };
        assert_eq!(small.recycle_above(12 << 20), (12 + 15) << 20);
        // Started at (or past) the cap: no room, recycled as soon as it grows at all.
        assert_eq!(small.recycle_above(40 << 20), 40 << 20);
    }

    #[test]
    fn growth_past_the_cap_traps_and_growth_within_is_counted() {
        let mut cap = MemoryCap::new(100);
        assert!(cap.memory_growing(0, 60, None).unwrap());
        assert!(cap.memory_growing(60, 90, None).unwrap());
        // A second memory counts against the same cap.
        let err = cap.memory_growing(0, 20, None).unwrap_err();
        assert!(err.downcast_ref::<MemoryCapExceeded>().is_some());
        assert!(!cap.memory_growing(0, 5, Some(4)).unwrap());
    }
}
