//! A size cap on one cache directory, with least-recently-used eviction. Recency is an entry's
//! mtime: set when it is written, bumped when it is used ([`SizeCap::touch`]). Access times are not
//! used: most file systems are mounted `noatime` or `relatime`.
//!
//! Cost: the directory is scanned when the cache opens, and after that only when the running
//! total of what was stored since the last scan crosses the cap — never once per entry, which
//! matters for the function cache (~12,800 entries per Python plugin). A scan that finds the cap
//! exceeded evicts down to 90% of it, so the next scan is a tenth of the cap of new entries away.
//! The running total is approximate (an entry replaced under the same key counts twice, another
//! process sharing the directory is seen only at the next scan); an error only brings a scan
//! early or late, and the scan itself counts what is really there.
//!
//! Eviction removes only names the cache itself writes ([`Layout`]): a cache directory pointed at
//! a directory that also holds other files never loses them.

use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::private_files::TEMP_MARK;

/// A hit bumps an entry's mtime only when it is older than this: recency to within minutes is
/// plenty for choosing what to evict, and most hits then cost no metadata write.
const TOUCH_GRANULARITY: Duration = Duration::from_secs(10 * 60);

/// A temporary file older than this was left by a crash, not being written: removed by a scan.
const STALE_TEMP: Duration = Duration::from_secs(60 * 60);

/// Where a cache keeps its entries under its root.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Layout {
    /// `<root>/<name>.<extension>`, nothing below.
    Flat { extension: &'static str },
    /// `<root>/<2 hex>/<62 hex>`: a sha256 fanned out over 256 directories.
    FannedOut,
}

impl Layout {
    fn is_entry(self, relative: &[&str]) -> bool {
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        match (self, relative) {
            (Layout::Flat { extension }, [name]) => name
                .strip_suffix(extension)
                .is_some_and(|stem| stem.len() > 1 && stem.ends_with('.')),
            (Layout::FannedOut, [dir, name]) => hex(dir, 2) && hex(name, 62),
            _ => false,
        }
    }
}

/// One entry found by a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) used: SystemTime,
}

/// What a scan decided: entries to remove, oldest first, and the bytes that stay.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) evict: Vec<Entry>,
    pub(crate) kept_bytes: u64,
}

/// The eviction rule, apart from the file system: nothing goes while the entries fit in
/// `max_bytes`; past it, least recently used entries go until the rest fit in `target_bytes`.
pub(crate) fn plan(mut entries: Vec<Entry>, max_bytes: u64, target_bytes: u64) -> Plan {
    let mut kept_bytes: u64 = entries.iter().map(|e| e.bytes).sum();
    if kept_bytes <= max_bytes {
        return Plan {
            evict: Vec::new(),
            kept_bytes,
        };
    }
    // The path breaks ties so the plan does not depend on directory order.
    entries.sort_by(|a, b| (a.used, &a.path).cmp(&(b.used, &b.path)));
    let mut evict = Vec::new();
    for entry in entries {
        if kept_bytes <= target_bytes {
            break;
        }
        kept_bytes -= entry.bytes;
        evict.push(entry);
    }
    Plan { evict, kept_bytes }
}

pub(crate) struct SizeCap {
    root: PathBuf,
    layout: Layout,
    max_bytes: u64,
    /// Bytes of entries under `root`, as of the last scan plus what was stored since.
    tracked: AtomicU64,
    /// One scan at a time; a store that finds a scan running leaves the work to it.
    scanning: Mutex<()>,
}

impl SizeCap {
    /// A cap of `max_bytes` on the entries under `root`. Does not touch the disk: call
    /// [`SizeCap::enforce`] once the directory is known to be trusted.
    pub(crate) fn new(root: PathBuf, layout: Layout, max_bytes: u64) -> Self {
        SizeCap {
            root,
            layout,
            max_bytes,
            tracked: AtomicU64::new(0),
            scanning: Mutex::new(()),
        }
    }

    /// Whether an entry of `bytes` may be stored at all: one larger than the cap would only evict
    /// everything, itself included.
    pub(crate) fn admits(&self, bytes: usize) -> bool {
        bytes as u64 <= self.max_bytes
    }

    /// Marks the entry open as `file` (with metadata `meta`) as just used.
    pub(crate) fn touch(&self, file: &File, meta: &Metadata) {
        let now = SystemTime::now();
        let recent = meta.modified().is_ok_and(|m| {
            now.duration_since(m)
                .is_ok_and(|age| age <= TOUCH_GRANULARITY)
        });
        if !recent {
            // Failing only makes the entry look older than it is.
            let _ = file.set_modified(now);
        }
    }

    /// Counts an entry of `bytes` just stored, and evicts when the total crosses the cap.
    pub(crate) fn stored(&self, bytes: usize) {
        let total = self
            .tracked
            .fetch_add(bytes as u64, Ordering::Relaxed)
            .saturating_add(bytes as u64);
        if total > self.max_bytes {
            self.enforce();
        }
    }

    /// Scans the directory, removes crash leftovers, and evicts least recently used entries if
    /// the cap is exceeded.
    pub(crate) fn enforce(&self) {
        let Ok(_scan) = self.scanning.try_lock() else {
            return;
        };
        let entries = self.scan();
        let plan = plan(
            entries,
            self.max_bytes,
            self.max_bytes - self.max_bytes / 10,
        );
        let mut kept_bytes = plan.kept_bytes;
        let mut freed = 0u64;
        for entry in &plan.evict {
            match std::fs::remove_file(&entry.path) {
                Ok(()) => freed += entry.bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => freed += entry.bytes,
                Err(e) => {
                    kept_bytes += entry.bytes;
                    tracing::debug!(path = %entry.path.display(), "cannot evict cache entry: {e}");
                }
            }
        }
        if !plan.evict.is_empty() {
            tracing::info!(
                cache = %self.root.display(),
                evicted = plan.evict.len(),
                freed_bytes = freed,
                kept_bytes,
                max_bytes = self.max_bytes,
                "cache over its size cap: least recently used entries evicted"
            );
        }
        self.tracked.store(kept_bytes, Ordering::Relaxed);
    }

    /// The entries under the root, removing stale temporary files on the way. Unreadable parts
    /// are skipped: they hold nothing the cap can count or remove.
    fn scan(&self) -> Vec<Entry> {
        let mut entries = Vec::new();
        let now = SystemTime::now();
        let Ok(top) = std::fs::read_dir(&self.root) else {
            return entries;
        };
        for item in top.flatten() {
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            match self.layout {
                Layout::Flat { .. } => self.consider(&[name], &item.path(), now, &mut entries),
                Layout::FannedOut => {
                    if !item.file_type().is_ok_and(|t| t.is_dir()) {
                        continue;
                    }
                    let Ok(sub) = std::fs::read_dir(item.path()) else {
                        continue;
                    };
                    for file in sub.flatten() {
                        let file_name = file.file_name();
                        let Some(file_name) = file_name.to_str() else {
                            continue;
                        };
                        self.consider(&[name, file_name], &file.path(), now, &mut entries);
                    }
                }
            }
        }
        entries
    }

    fn consider(&self, relative: &[&str], path: &Path, now: SystemTime, entries: &mut Vec<Entry>) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if self.layout.is_entry(relative) {
            entries.push(Entry {
                path: path.to_owned(),
                bytes: meta.len(),
                used,
            });
            return;
        }
        // A temporary file of one of our entries: `<entry name>.tmp-…`.
        let (last, dirs) = relative.split_last().expect("a path has a name");
        let Some((entry_name, _)) = last.split_once(TEMP_MARK) else {
            return;
        };
        let mut as_entry = dirs.to_vec();
        as_entry.push(entry_name);
        let stale = now.duration_since(used).is_ok_and(|age| age > STALE_TEMP);
        if self.layout.is_entry(&as_entry) && stale {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CWASM: Layout = Layout::Flat { extension: "cwasm" };

    fn ago(secs: u64) -> SystemTime {
        SystemTime::now() - Duration::from_secs(secs)
    }

    /// An entry of `bytes` bytes last used `secs` seconds ago.
    fn entry(dir: &Path, name: &str, bytes: usize, secs: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![7u8; bytes]).unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(ago(secs))
            .unwrap();
        path
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_plan_evicts_oldest_first_and_only_past_the_cap() {
        let e = |name: &str, bytes, secs| Entry {
            path: PathBuf::from(name),
            bytes,
            used: ago(secs),
        };
        let entries = vec![e("new", 100, 10), e("old", 100, 3000), e("mid", 100, 200)];
        assert_eq!(plan(entries.clone(), 300, 200).evict, vec![]);
        let p = plan(entries, 250, 150);
        let evicted: Vec<_> = p.evict.iter().map(|e| e.path.to_str().unwrap()).collect();
        assert_eq!(evicted, ["old", "mid"]);
        assert_eq!(p.kept_bytes, 100);
    }

    #[test]
    fn a_store_past_the_cap_evicts_least_recently_used_entries_until_under_it() {
        let dir = tempfile::tempdir().unwrap();
        for (name, secs) in [("a.cwasm", 4000), ("b.cwasm", 3000), ("c.cwasm", 2000)] {
            entry(dir.path(), name, 100, secs);
        }
        let cap = SizeCap::new(dir.path().to_owned(), CWASM, 350);
        cap.enforce();
        assert_eq!(names(dir.path()).len(), 3, "under the cap, nothing goes");

        // `a` is used now: `b` becomes the least recently used.
        let a = File::open(dir.path().join("a.cwasm")).unwrap();
        cap.touch(&a, &a.metadata().unwrap());
        entry(dir.path(), "d.cwasm", 100, 0);
        cap.stored(100);
        assert_eq!(names(dir.path()), ["a.cwasm", "c.cwasm", "d.cwasm"]);
        let total: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 350, "{total}");
    }

    #[test]
    fn only_the_cache_s_own_names_are_evicted_and_crash_leftovers_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        entry(dir.path(), "notes.txt", 1000, 9000);
        entry(dir.path(), "x.cwasm.tmp-1-2-3", 100, 9000);
        entry(dir.path(), "y.cwasm.tmp-1-2-4", 100, 0);
        entry(dir.path(), "z.cwasm", 100, 9000);
        SizeCap::new(dir.path().to_owned(), CWASM, 50).enforce();
        assert_eq!(names(dir.path()), ["notes.txt", "y.cwasm.tmp-1-2-4"]);
    }

    #[test]
    fn fanned_out_entries_are_counted_and_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let (sub_a, sub_b) = (dir.path().join("ab"), dir.path().join("cd"));
        std::fs::create_dir(&sub_a).unwrap();
        std::fs::create_dir(&sub_b).unwrap();
        let old = entry(&sub_a, &"0".repeat(62), 100, 5000);
        let new = entry(&sub_b, &"1".repeat(62), 100, 10);
        let foreign = entry(&sub_b, "README", 100, 9000);
        SizeCap::new(dir.path().to_owned(), Layout::FannedOut, 150).enforce();
        assert!(!old.exists());
        assert!(new.exists() && foreign.exists());
    }

    #[test]
    fn stores_under_the_tracked_cap_do_not_scan_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cap = SizeCap::new(dir.path().to_owned(), CWASM, 300);
        cap.enforce();
        // Written behind the cap's back (another process): not seen until the next scan.
        entry(dir.path(), "a.cwasm", 1000, 9000);
        cap.stored(100);
        assert!(dir.path().join("a.cwasm").exists());
        cap.stored(250);
        assert!(!dir.path().join("a.cwasm").exists());
        assert!(!cap.admits(301) && cap.admits(300));
    }
}
