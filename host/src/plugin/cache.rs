//! On-disk cache of compiled components, keyed by the component's sha256 and the engine's
//! compatibility hash, so a restart (or a swap back to an earlier version) skips compilation: a
//! Python component is ~18 MB of Wasm and takes seconds to compile.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

/// Where a component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now and stored for next time.
    Compiled,
    /// Loaded precompiled from the cache directory.
    Hit,
    /// Compiled now; no cache directory is configured.
    Uncached,
}

pub(crate) struct CompileCache {
    dir: PathBuf,
    /// Distinguishes engines whose compiled code is not interchangeable (wasmtime version, target,
    /// settings such as fuel): artifacts of another engine are never even looked at.
    engine_key: u64,
}

impl CompileCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(CompileCache {
            dir,
            engine_key: hasher.finish(),
        })
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{sha256}-{:016x}.cwasm", self.engine_key))
    }

    /// Returns the compiled component for `bytes`, from the cache when possible. A cache that cannot
    /// be read or written only costs a compilation; it is logged, never fatal.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let path = self.path(sha256);
        if path.exists() {
            // SAFETY: the file was written by `store` below from `Engine::precompile_component`
            // in a directory owned by this host; wasmtime still checks it matches this engine.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    "compiled-component cache entry unusable, recompiling: {e:#}"
                ),
            }
        }
        let compiled = engine.precompile_component(bytes)?;
        if let Err(e) = store(&path, &compiled) {
            tracing::warn!(path = %path.display(), "cannot write compiled-component cache: {e}");
        }
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((component, CacheOutcome::Compiled))
    }
}

/// Writes atomically (temporary file, then rename) so a crash never leaves a torn artifact.
fn store(path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, compiled)?;
    std::fs::rename(&tmp, path)
}
