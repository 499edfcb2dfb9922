//! On-disk cache of compiled components, keyed by the component's sha256 and the engine's
//! compatibility hash, so a restart (or a swap back to an earlier version) skips compilation: a
//! Python component is ~18 MB of Wasm and takes seconds to compile.
//!
//! A cached component is native code that runs outside the Wasm sandbox, so the cache is only
//! read or written when the directory and the entry belong to this process's user and nobody
//! else can write them ([`trust`]); otherwise every load compiles, and one warning says why.
//! The cache holds at most its share of the engine's `cache_max_bytes` (half of it; the other
//! half is the function cache's, [`super::function_cache`]); past that, least recently used
//! entries are evicted ([`size_cap`]).
//!
//! Layout:
//! - [`trust`]: who may have written a cache directory or entry; the pure rule and its warning.
//! - [`private_files`]: directories (0700) and atomically written entries (0600) of the caches.
//! - [`size_cap`]: the size cap and least-recently-used eviction, shared with the function cache.

pub(crate) mod private_files;
pub(crate) mod size_cap;
#[cfg(test)]
mod tests;
pub(crate) mod trust;

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use wasmtime::component::Component;
use wasmtime::Engine;

use size_cap::{Layout, SizeCap};
use trust::Trust;

/// Where a component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now and stored for next time.
    Compiled,
    /// Loaded precompiled from the cache directory.
    Hit,
    /// Compiled now and not stored: no cache directory is configured, or it is not trusted (the
    /// log says why).
    Uncached,
}

const EXTENSION: &str = "cwasm";

pub(crate) struct CompileCache {
    dir: PathBuf,
    /// Distinguishes engines whose compiled code is not interchangeable (wasmtime version, target,
    /// settings such as fuel): artifacts of another engine are never even looked at.
    engine_key: u64,
    trust: Trust,
    cap: SizeCap,
}

impl CompileCache {
    /// Opens (creating it with mode 0700 if missing) the cache in `dir`, holding at most
    /// `max_bytes` of compiled components. An untrusted directory is not an error: it is logged
    /// and left alone.
    pub(crate) fn new(dir: PathBuf, engine: &Engine, max_bytes: u64) -> std::io::Result<Self> {
        private_files::create_dir(&dir)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let cache = CompileCache {
            cap: SizeCap::new(
                dir.clone(),
                Layout::Flat {
                    extension: EXTENSION,
                },
                max_bytes,
            ),
            dir,
            engine_key: hasher.finish(),
            trust: Trust::new("compiled-component"),
        };
        if cache.trust.dir(&cache.dir) {
            cache.cap.enforce();
        }
        Ok(cache)
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{sha256}-{:016x}.{EXTENSION}", self.engine_key))
    }

    /// Returns the compiled component for `bytes`, from the cache when possible. A cache that cannot
    /// be read or written only costs a compilation; it is logged, never fatal.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        // Checked on every load (one stat; loads are rare) so a directory opened up after start
        // is refused from then on.
        if !self.trust.dir(&self.dir) {
            let component = Component::new(engine, bytes)?;
            return Ok((component, CacheOutcome::Uncached));
        }
        let path = self.path(sha256);
        if let Ok(file) = std::fs::File::open(&path) {
            // The metadata of the open file, so the check is about what is read below; replacing
            // the file in between would take write access to the directory, checked above.
            let meta = file
                .metadata()
                .ok()
                .filter(|meta| self.trust.entry(&path, meta));
            if let Some(meta) = meta {
                // SAFETY: the file is in a directory only this user can write, is owned by this
                // user and not writable by anyone else, so it was written by `load` below from
                // `Engine::precompile_component` (or by this user deliberately); wasmtime still
                // checks that it was compiled by a compatible engine.
                match unsafe { Component::deserialize_file(engine, &path) } {
                    Ok(component) => {
                        self.cap.touch(&file, &meta);
                        return Ok((component, CacheOutcome::Hit));
                    }
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        "compiled-component cache entry unusable, recompiling: {e:#}"
                    ),
                }
            }
            // An untrusted entry in a trusted directory is replaced by the store below.
        }
        let compiled = engine.precompile_component(bytes)?;
        if self.cap.admits(compiled.len()) {
            match private_files::write_entry(&path, &compiled) {
                Ok(()) => self.cap.stored(compiled.len()),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    "cannot write compiled-component cache: {e}"
                ),
            }
        }
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((component, CacheOutcome::Compiled))
    }
}
