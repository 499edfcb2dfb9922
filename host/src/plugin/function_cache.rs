//! Cranelift's incremental compilation cache on disk: compiled code per function, keyed by a
//! hash of the function's IR and the compiler's settings. Two builds of a Python plugin differ in
//! the interpreter's memory snapshot, not in its ~12,800 functions, so a new version compiles
//! from this cache in a fraction of the time a whole compile takes; the same holds for most of a
//! Rust or JS plugin's code between two edits. It sits beside the whole-component cache
//! ([`super::cache`]), which only helps when the very same bytes come back.
//!
//! Entries are written atomically and never modified; a missing or unreadable entry costs only
//! that function's compilation. Cranelift re-checks what it takes from the cache against the
//! function it compiles, so a wrong entry cannot be used for another function — but an entry is
//! machine code the compiler copies into the plugin, so, as for whole components, nothing is read
//! or written unless the cache directory, this directory and the entry belong to this process's
//! user and nobody else can write them ([`super::cache::trust`]). The directory holds at most its
//! share of the engine's `cache_max_bytes` (half; [`super::cache::size_cap`]).

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::private_files;
use super::cache::size_cap::{Layout, SizeCap};
use super::cache::trust::Trust;

pub(crate) struct FunctionCache {
    dir: PathBuf,
    /// Decided once when the cache opens: the engine, and so this cache, lives as long as the
    /// host, and nobody else can change a trusted directory's owner or mode afterwards.
    trusted: bool,
    trust: Trust,
    cap: SizeCap,
}

impl std::fmt::Debug for FunctionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionCache")
            .field("dir", &self.dir)
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl FunctionCache {
    /// Opens the cache in `<cache_dir>/functions`, creating both with mode 0700 if missing,
    /// holding at most `max_bytes`. An untrusted directory is not an error: it is logged, and the
    /// cache then neither reads nor writes.
    pub(crate) fn new(cache_dir: &Path, max_bytes: u64) -> std::io::Result<Self> {
        let dir = cache_dir.join("functions");
        let trust = Trust::new("compiled-function");
        private_files::create_dir(cache_dir)?;
        // Nothing is created inside an untrusted directory.
        let trusted = trust.dir(cache_dir) && {
            private_files::create_dir(&dir)?;
            trust.dir(&dir)
        };
        let cache = FunctionCache {
            cap: SizeCap::new(dir.clone(), Layout::FannedOut, max_bytes),
            dir,
            trusted,
            trust,
        };
        if trusted {
            cache.cap.enforce();
        }
        Ok(cache)
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
        if !self.trusted {
            return None;
        }
        let path = self.path(key);
        let mut file = std::fs::File::open(&path).ok()?;
        // The open file's metadata: the check is about what is read next.
        let meta = file.metadata().ok()?;
        if !self.trust.entry(&path, &meta) {
            return None;
        }
        let mut code = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut code).ok()?;
        self.cap.touch(&file, &meta);
        Some(Cow::Owned(code))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        if !self.trusted || !self.cap.admits(value.len()) {
            return false;
        }
        let path = self.path(key);
        let write = || -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                private_files::create_dir(parent)?;
            }
            private_files::write_entry(&path, &value)
        };
        let written = write().is_ok();
        if written {
            self.cap.stored(value.len());
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use wasmtime::CacheStore as _;

    const GIB: u64 = 1 << 30;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn what_is_inserted_is_read_back_under_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path(), GIB).unwrap();
        assert!(cache.get(b"k1").is_none());
        assert!(cache.insert(b"k1", b"code one".to_vec()));
        assert!(cache.insert(b"k2", b"code two".to_vec()));
        assert_eq!(cache.get(b"k1").as_deref(), Some(&b"code one"[..]));
        assert_eq!(cache.get(b"k2").as_deref(), Some(&b"code two"[..]));
        assert!(cache.get(b"k3").is_none());
    }

    #[test]
    fn a_group_writable_cache_directory_is_neither_read_nor_written() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = FunctionCache::new(dir.path(), GIB).unwrap();
        assert!(trusted.insert(b"k1", b"planted".to_vec()));
        for writable in [dir.path().to_owned(), dir.path().join("functions")] {
            chmod(&writable, 0o770);
            let cache = FunctionCache::new(dir.path(), GIB).unwrap();
            assert!(cache.get(b"k1").is_none(), "{writable:?} is group-writable");
            assert!(!cache.insert(b"k2", b"code".to_vec()));
            assert!(!cache.path(b"k2").exists());
            chmod(&writable, 0o700);
        }
        let cache = FunctionCache::new(dir.path(), GIB).unwrap();
        assert_eq!(cache.get(b"k1").as_deref(), Some(&b"planted"[..]));
    }

    #[test]
    fn an_entry_others_can_write_is_not_read_and_is_replaced_by_the_next_insert() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path(), GIB).unwrap();
        assert!(cache.insert(b"k1", b"code".to_vec()));
        chmod(&cache.path(b"k1"), 0o666);
        assert!(cache.get(b"k1").is_none());
        assert!(cache.insert(b"k1", b"code".to_vec()));
        assert_eq!(cache.get(b"k1").as_deref(), Some(&b"code"[..]));
    }

    #[test]
    fn inserts_past_the_cap_evict_the_least_recently_used_functions() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path(), 1000).unwrap();
        let keys: Vec<Vec<u8>> = (0..13u64).map(|i| i.to_le_bytes().to_vec()).collect();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for (i, key) in keys[..9].iter().enumerate() {
            assert!(cache.insert(key, vec![1; 100]));
            // Written long ago, one second apart, so that the order of use decides.
            let file = std::fs::File::options()
                .write(true)
                .open(cache.path(key))
                .unwrap();
            file.set_modified(hour_ago + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        assert!(
            cache.get(&keys[0]).is_some(),
            "used now: the newest of the nine"
        );
        for key in &keys[9..] {
            assert!(cache.insert(key, vec![1; 100]));
        }
        let kept: Vec<bool> = keys.iter().map(|k| cache.path(k).exists()).collect();
        let total = kept.iter().filter(|&&k| k).count() * 100;
        assert!(total <= 1000, "{total} bytes kept");
        assert!(kept[0], "the recently used entry stays");
        assert!(!kept[1], "the least recently used entry goes first");
        assert!(kept[12], "the one just inserted stays");
        assert!(
            !cache.insert(b"huge", vec![1; 1001]),
            "larger than the cap: not stored"
        );
    }
}
