//! Cranelift's incremental compilation cache on disk: compiled code per function, keyed by a
//! hash of the function's IR and the compiler's settings. Two builds of a Python plugin differ in
//! the interpreter's memory snapshot, not in its ~12,800 functions, so a new version compiles
//! from this cache in a fraction of the time a whole compile takes; the same holds for most of a
//! Rust or JS plugin's code between two edits. It sits beside the whole-component cache
//! ([`super::cache`]), which only helps when the very same bytes come back.
//!
//! Entries are written atomically and never modified; a missing or unreadable entry costs only
//! that function's compilation. Cranelift re-checks what it takes from the cache against the
//! function it compiles, so a wrong entry cannot be used for another function.

use std::borrow::Cow;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    pub(crate) fn new(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(FunctionCache { dir })
    }

    /// `<dir>/<2 hex>/<62 hex>`: the key's sha256, fanned out so that no directory holds tens of
    /// thousands of files.
    fn path(&self, key: &[u8]) -> PathBuf {
        let name = hex::encode(Sha256::digest(key));
        self.dir.join(&name[..2]).join(&name[2..])
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        std::fs::read(self.path(key)).ok().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.path(key);
        let write = || -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // Unique per thread: compilation runs on several threads at once.
            let tmp = path.with_extension(format!(
                "tmp{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, &value)?;
            std::fs::rename(&tmp, &path)
        };
        write().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::CacheStore as _;

    #[test]
    fn what_is_inserted_is_read_back_under_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path().join("functions")).unwrap();
        assert!(cache.get(b"k1").is_none());
        assert!(cache.insert(b"k1", b"code one".to_vec()));
        assert!(cache.insert(b"k2", b"code two".to_vec()));
        assert_eq!(cache.get(b"k1").as_deref(), Some(&b"code one"[..]));
        assert_eq!(cache.get(b"k2").as_deref(), Some(&b"code two"[..]));
        assert!(cache.get(b"k3").is_none());
    }
}
