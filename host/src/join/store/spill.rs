//! Where an [`EventStore`](super::EventStore)'s oldest segments go when its resident bytes pass its
//! budget: files on local disk, read with positioned reads. Depends on std's file system only.
//!
//! The files are a cache, not a source of truth: a restarted task rebuilds its state from Kafka.
//! So nothing is fsynced, a file is deleted as soon as none of its segments is needed, and a
//! process that died without cleaning up has its directory removed by the next one
//! ([`SpillDir::create`]).
//!
//! Why positioned reads and not mmap: mapped pages count in the process's resident set, the figure
//! the budget bounds; read pages go to the kernel's page cache, which it reclaims by itself.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

/// A file takes consecutive spilled segments until it reaches this size. Large enough that
/// opening and deleting files is rare, small enough that one long-held event pins little disk.
const FILE_BYTES: u64 = 64 << 20;

/// This process's directory of spill files, shared by every store; removed with the last `Arc`.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    next_file: AtomicU64,
}

impl SpillDir {
    /// Creates `base/cojoin-<pid>/`, first removing the directories under `base` of `cojoin`
    /// processes that no longer run (left by a kill -9). A directory named after our own pid is a
    /// leftover too (a container restarts with the same pid): its files are overwritten as our
    /// names come up, and it is removed with ours. While one is in use, creating it again under
    /// the same base returns it: two would hand out the same file names and remove each other's
    /// directory.
    pub fn create(base: &Path) -> io::Result<Arc<SpillDir>> {
        let pid = std::process::id();
        let path = base.join(format!("cojoin-{pid}"));
        let mut in_use = in_use();
        in_use.retain(|d| d.strong_count() > 0);
        if let Some(dir) = in_use
            .iter()
            .filter_map(Weak::upgrade)
            .find(|d| d.path == path)
        {
            return Ok(dir);
        }
        remove_leftovers(base, pid);
        fs::create_dir_all(&path)?;
        let dir = Arc::new(SpillDir {
            path,
            next_file: AtomicU64::new(0),
        });
        in_use.push(Arc::downgrade(&dir));
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn new_file(&self) -> io::Result<(File, PathBuf)> {
        let n = self.next_file.fetch_add(1, Relaxed);
        let path = self.path.join(format!("{n}.seg"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok((file, path))
    }
}

/// The spill dirs of this process.
fn in_use() -> std::sync::MutexGuard<'static, Vec<Weak<SpillDir>>> {
    static IN_USE: Mutex<Vec<Weak<SpillDir>>> = Mutex::new(Vec::new());
    IN_USE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let in_use = in_use();
        // Created again since this one's last user let go: the directory is the new one's.
        if in_use
            .iter()
            .any(|d| d.upgrade().is_some_and(|d| d.path == self.path))
        {
            return;
        }
        // Best effort: what is left is removed by the next process (`remove_leftovers`).
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Removes `base/cojoin-<pid>` for every pid that is not ours and has no `/proc/<pid>`.
fn remove_leftovers(base: &Path, own_pid: u32) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cojoin-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own_pid || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let path = entry.path();
        match fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(dir = %path.display(), "removed the spill files of a process that no longer runs")
            }
            Err(e) => {
                tracing::warn!(dir = %path.display(), "cannot remove the spill files of a process that no longer runs: {e}")
            }
        }
    }
}

/// Where a spilled segment's bytes are.
#[derive(Clone, Copy, Debug)]
pub struct Disk {
    /// Number of the file in its store's [`Spill`].
    file: u64,
    at: u64,
    pub len: usize,
}

struct SpillFile {
    file: File,
    path: PathBuf,
    len: u64,
    /// Segments in the file still needed; the file is deleted when none is.
    segments: u32,
}

/// One store's spill files, oldest first.
pub struct Spill {
    dir: Arc<SpillDir>,
    /// By number from `first` on; `None` once deleted.
    files: VecDeque<Option<SpillFile>>,
    first: u64,
    /// The file segments are appended to, if it is still open for that.
    writing: Option<u64>,
    /// A write failed: the store stops spilling (and said so once).
    pub failed: bool,
    pub disk_bytes: usize,
    pub spilled_total: u64,
    pub read_back_total: u64,
}

impl Spill {
    pub fn new(dir: Arc<SpillDir>) -> Self {
        Spill {
            dir,
            files: VecDeque::new(),
            first: 0,
            writing: None,
            failed: false,
            disk_bytes: 0,
            spilled_total: 0,
            read_back_total: 0,
        }
    }

    /// Appends a segment's bytes to the current file, or `None` if that failed: then nothing is
    /// lost (the caller keeps the bytes), a warning names the fix, and the store stops spilling.
    pub fn write(&mut self, bytes: &[u8]) -> Option<Disk> {
        match self.try_write(bytes) {
            Ok(disk) => {
                self.spilled_total += bytes.len() as u64;
                Some(disk)
            }
            Err(e) => {
                self.failed = true;
                // The file may hold part of the segment: no more goes into it.
                self.writing = None;
                tracing::warn!(
                    dir = %self.dir.path().display(),
                    "cannot spill join state to disk, so this task keeps all of it in memory \
                     from now on: {e}; free disk space under state.dir or raise memory.state_bytes"
                );
                None
            }
        }
    }

    fn try_write(&mut self, bytes: &[u8]) -> io::Result<Disk> {
        let open = self
            .writing
            .filter(|&n| self.file(n).len + bytes.len() as u64 <= FILE_BYTES);
        let number = match open {
            Some(n) => n,
            None => {
                let (file, path) = self.dir.new_file()?;
                let number = self.first + self.files.len() as u64;
                self.files.push_back(Some(SpillFile {
                    file,
                    path,
                    len: 0,
                    segments: 0,
                }));
                self.writing = Some(number);
                number
            }
        };
        let f = self.file_mut(number);
        f.file.write_all_at(bytes, f.len)?;
        let disk = Disk {
            file: number,
            at: f.len,
            len: bytes.len(),
        };
        f.len += bytes.len() as u64;
        f.segments += 1;
        self.disk_bytes += bytes.len();
        Ok(disk)
    }

    /// Reads `buf.len()` bytes from `at` in the segment.
    pub fn read(&self, disk: &Disk, at: usize, buf: &mut [u8]) {
        let f = self.file(disk.file);
        if let Err(e) = f.file.read_exact_at(buf, disk.at + at as u64) {
            unreadable(&f.path, e);
        }
    }

    /// The whole segment, counted as read back.
    pub fn read_back(&mut self, disk: &Disk) -> Vec<u8> {
        let mut bytes = vec![0; disk.len];
        self.read(disk, 0, &mut bytes);
        self.read_back_total += disk.len as u64;
        bytes
    }

    /// Overwrites bytes of a spilled segment in place.
    pub fn write_at(&self, disk: &Disk, at: usize, bytes: &[u8]) {
        let f = self.file(disk.file);
        if let Err(e) = f.file.write_all_at(bytes, disk.at + at as u64) {
            unreadable(&f.path, e);
        }
    }

    /// The segment is no longer needed on disk; its file goes once none of its segments is.
    pub fn release(&mut self, disk: &Disk) {
        let f = self.file_mut(disk.file);
        f.segments -= 1;
        if f.segments > 0 {
            return;
        }
        let f = self.files[(disk.file - self.first) as usize]
            .take()
            .expect("a file with segments is open");
        self.disk_bytes -= f.len as usize;
        if self.writing == Some(disk.file) {
            self.writing = None;
        }
        remove(f);
        while let Some(None) = self.files.front() {
            self.files.pop_front();
            self.first += 1;
        }
    }

    /// Files still on disk.
    #[cfg(test)]
    pub fn paths(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .flatten()
            .map(|f| f.path.clone())
            .collect()
    }

    fn file(&self, number: u64) -> &SpillFile {
        self.files[(number - self.first) as usize]
            .as_ref()
            .expect("a spilled segment's file is kept until the segment is released")
    }

    fn file_mut(&mut self, number: u64) -> &mut SpillFile {
        self.files[(number - self.first) as usize]
            .as_mut()
            .expect("a spilled segment's file is kept until the segment is released")
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        for f in self.files.drain(..).flatten() {
            remove(f);
        }
    }
}

fn remove(f: SpillFile) {
    drop(f.file);
    if let Err(e) = fs::remove_file(&f.path) {
        tracing::warn!(file = %f.path.display(), "cannot remove a spill file: {e}");
    }
}

/// Our own file failed us. The events in it are in no other place in this process, and going on
/// without them would drop matches silently; a restarted task rebuilds its state from Kafka. So
/// this is a panic, not an error the join could handle.
#[cold]
fn unreadable(path: &Path, e: io::Error) -> ! {
    panic!(
        "cannot access spilled join state in {}: {e}; the task cannot go on without it \
         (a restart rebuilds it from Kafka)",
        path.display()
    )
}
