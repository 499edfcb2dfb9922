//! Creating cache directories and entries that only this process's user can write — the
//! condition [`super::trust`] checks before using them — whatever the umask.
//!
//! An entry is written to a temporary file and renamed into place, so a reader sees the whole
//! old entry or the whole new one, never a torn one; the temporary name is unique per write, so
//! two threads (or processes) storing the same key at once each rename their own complete file
//! and the last rename wins. Both wrote the same content for the same key, and a reader that
//! already opened or mapped the replaced file keeps its inode.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Marks a temporary file: `<entry name>.tmp-<pid>-<thread>-<n>`. Eviction skips young ones
/// (being written) and removes old ones (left by a crash).
pub(crate) const TEMP_MARK: &str = ".tmp-";

/// Creates `dir` and any missing parent with mode 0700. An existing directory is left as it is:
/// [`super::trust`] decides whether it may be used.
pub(crate) fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `bytes` to `path` atomically with mode 0600.
pub(crate) fn write_entry(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A name no other write uses: the pid tells processes sharing the directory apart, the thread
/// and a process-wide counter tell writes of one process apart (two uploads of the same plugin
/// compile on two threads at once).
fn temp_path(path: &Path) -> PathBuf {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(
        "{TEMP_MARK}{}-{thread}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn entries_and_directories_are_private_whatever_the_umask_allows() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir(&nested).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&nested), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        let entry = nested.join("e");
        write_entry(&entry, b"one").unwrap();
        write_entry(&entry, b"two").unwrap();
        assert_eq!(mode(&entry), 0o600);
        assert_eq!(std::fs::read(&entry).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(&nested).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn two_writes_from_one_thread_use_two_temporary_names() {
        let p = Path::new("/c/x.cwasm");
        let (a, b) = (temp_path(p), temp_path(p));
        assert_ne!(a, b);
        assert!(a.to_str().unwrap().starts_with("/c/x.cwasm.tmp-"), "{a:?}");
    }
}
