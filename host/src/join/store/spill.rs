//! Where an [`EventStore`](super::EventStore)'s oldest segments go when its resident bytes pass its
//! budget: files on local disk, read with positioned reads. Depends on std's file system only (and
//! crc32fast).
//!
//! The files are a cache, not a source of truth: a restarted task rebuilds its state from Kafka.
//! So nothing is fsynced, a file is deleted as soon as none of its segments is needed, and a
//! process that died without cleaning up has its directory removed by the next one
//! ([`SpillDir::create`]).
//!
//! Hosts may share `state.dir` from different PID namespaces (two containers, both pid 1), so a
//! pid names no directory by itself: each [`SpillDir`] is a new directory with a random part in its
//! name, holding a file it keeps locked (`flock`) for as long as it lives, and only a directory
//! whose lock can be taken is a leftover. And what is read back is checked: every 4 KiB block of
//! a spill file has a CRC32 in RAM, and a read whose bytes do not match (another process wrote to
//! the file, or it was damaged) stops the task with an error naming the file, never hands out
//! wrong events.
//!
//! Why positioned reads and not mmap: mapped pages count in the process's resident set, the figure
//! the budget bounds; read pages go to the kernel's page cache, which it reclaims by itself.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

/// A file takes consecutive spilled segments until it reaches this size. Large enough that
/// opening and deleting files is rare, small enough that one long-held event pins little disk.
const FILE_BYTES: u64 = 64 << 20;

/// Spill files are checked in blocks of this many bytes, aligned in the file (with the page
/// cache's pages): a CRC32 per block stays in RAM, 0.1 % of the bytes on disk.
const BLOCK: u64 = 4096;

/// A read spanning at most this many bytes of whole blocks is one positioned read of those
/// blocks; a longer one (reading a segment back) reads the caller's bytes in place and only the
/// partial blocks at its ends beside them.
const SMALL_READ: u64 = 4 * BLOCK;

/// The file in a spill directory that its process keeps locked.
const LOCK: &str = "lock";

/// Names tried before giving up: a name is taken only by a host that drew the same 64 random
/// bits, or lost to another host's cleanup (`lock_new`).
const ATTEMPTS: usize = 16;

/// This process's directory of spill files, shared by every store; removed with the last `Arc`.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    base: PathBuf,
    next_file: AtomicU64,
    /// `path/lock`, locked for as long as this lives: what tells other hosts sharing `base`, in
    /// whatever PID namespace, that the directory is in use. Closed (unlocked) after `Drop`
    /// removed the directory.
    _lock: File,
}

impl SpillDir {
    /// This process's spill directory under `base` ([`Self::create_for_pid`] with our pid): while
    /// one is in use, creating it again under the same base returns it, so that all stores of a
    /// process share one directory.
    pub fn create(base: &Path) -> io::Result<Arc<SpillDir>> {
        let mut in_use = in_use();
        in_use.retain(|d| d.strong_count() > 0);
        if let Some(dir) = in_use
            .iter()
            .filter_map(Weak::upgrade)
            .find(|d| d.base == base)
        {
            return Ok(dir);
        }
        let dir = Self::create_for_pid(base, std::process::id())?;
        in_use.push(Arc::downgrade(&dir));
        Ok(dir)
    }

    /// Creates a new directory `base/cojoin-<pid>-<16 random hex digits>/` holding a locked
    /// `lock` file, first removing the directories under `base` that no host uses any more (left
    /// by a kill -9; see [`remove_leftovers`]). The pid is only for people reading `base`: two
    /// hosts with the same pid (in two containers) get two directories.
    pub(super) fn create_for_pid(base: &Path, pid: u32) -> io::Result<Arc<SpillDir>> {
        fs::create_dir_all(base)?;
        remove_leftovers(base, pid);
        for _ in 0..ATTEMPTS {
            let path = base.join(format!("cojoin-{pid}-{:016x}", random()));
            match fs::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
            match lock_new(&path) {
                Ok(Some(lock)) => {
                    return Ok(Arc::new(SpillDir {
                        path,
                        base: base.to_owned(),
                        next_file: AtomicU64::new(0),
                        _lock: lock,
                    }))
                }
                // Another host's cleanup took the directory before we locked it: take another.
                Ok(None) => continue,
                Err(e) => {
                    let _ = fs::remove_dir_all(&path);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot lock {}: {e}", path.join(LOCK).display()),
                    ));
                }
            }
        }
        Err(io::Error::other(format!(
            "no new directory name under {} after {ATTEMPTS} attempts",
            base.display()
        )))
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
            .create_new(true)
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
        // Best effort: what is left is removed by the next process (`remove_leftovers`). The lock
        // is held until the directory is gone, so no other host's cleanup races this one.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// 64 bits no other host draws: std's randomly keyed hasher over the time and a counter.
fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one((nanos, COUNTER.fetch_add(1, Relaxed)))
}

/// Creates and locks `dir/lock`; `None` if another host's cleanup removed or is removing `dir`
/// (it found the directory empty, or took the lock first).
fn lock_new(dir: &Path) -> io::Result<Option<File>> {
    let path = dir.join(LOCK);
    let file = match OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    // A cleanup may have taken the lock first, removed the directory and let go: the lock counts
    // only while the file is still at its path.
    let there = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let ours = file.metadata()?;
    Ok((ours.dev() == there.dev() && ours.ino() == there.ino()).then_some(file))
}

/// What a directory name under `state.dir` says about whose it is.
#[derive(Debug, PartialEq)]
enum Layout {
    /// `cojoin-<pid>-<16 hex digits>`: in use while its `lock` file is locked.
    Locked,
    /// `cojoin-<pid>`, made by cojoin versions before the lock (issue 29).
    Pid(u32),
}

fn layout(name: &str) -> Option<Layout> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rest = name.strip_prefix("cojoin-")?;
    match rest.split_once('-') {
        Some((pid, id)) => {
            (digits(pid) && id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .then_some(Layout::Locked)
        }
        None if digits(rest) => rest.parse().ok().map(Layout::Pid),
        None => None,
    }
}

/// Removes the spill directories under `base` that no running host uses:
///
/// - `cojoin-<pid>-<hex>` whose `lock` file we can lock (its host died: the kernel let go of its
///   lock), holding the lock while removing. One whose lock is held is never touched, whatever
///   its pid: in another PID namespace, a live host's pid may be dead or someone else's here. One
///   with no `lock` file yet is removed only if empty ([`lock_new`] then takes another name).
/// - `cojoin-<pid>` of older versions (no lock): still by the old rule, if no `/proc/<pid>`
///   exists and it is not `own_pid`; a host in another PID namespace is not told apart by that,
///   which is why the new layout has a lock. One with our own pid is left alone (it may be an
///   older host's, pid 1 in another container), with a warning.
fn remove_leftovers(base: &Path, own_pid: u32) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some(layout) = entry.file_name().to_str().and_then(layout) else {
            continue;
        };
        let path = entry.path();
        match layout {
            Layout::Locked => remove_if_unlocked(&path),
            Layout::Pid(pid) if pid == own_pid => tracing::warn!(
                dir = %path.display(),
                "state.dir holds the spill files of an older cojoin with this host's pid: left \
                 alone, as a host in another PID namespace may still use them; remove the \
                 directory once no older cojoin shares state.dir"
            ),
            Layout::Pid(pid) => {
                if !Path::new("/proc").join(pid.to_string()).exists() {
                    remove_leftover(&path);
                }
            }
        }
    }
}

fn remove_if_unlocked(dir: &Path) {
    let lock = match File::open(dir.join(LOCK)) {
        Ok(lock) => lock,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Being created (or its host died right then): only an empty one goes.
            if fs::remove_dir(dir).is_ok() {
                tracing::debug!(dir = %dir.display(), "removed an empty spill directory without a lock");
            }
            return;
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot tell whether a host still uses this spill directory: {e}");
            return;
        }
    };
    match lock.try_lock() {
        Ok(()) => remove_leftover(dir),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => {
            tracing::warn!(dir = %dir.display(), "cannot tell whether a host still uses this spill directory: {e}")
        }
    }
}

fn remove_leftover(dir: &Path) {
    match fs::remove_dir_all(dir) {
        Ok(()) => {
            tracing::info!(dir = %dir.display(), "removed the spill files of a process that no longer runs")
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot remove the spill files of a process that no longer runs: {e}")
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
    /// The CRC32 of each [`BLOCK`] of the file as we wrote it (the last one of the bytes it has so
    /// far). Cells: a partial overwrite ([`Spill::write_at`]) updates them behind `&self`.
    crcs: Vec<Cell<u32>>,
}

impl SpillFile {
    /// Reads `buf.len()` bytes from `start`, checking every block they touch: in one read of the
    /// whole blocks into `scratch` if they are few, else in place plus the partial blocks at the
    /// ends.
    fn read(&self, start: u64, buf: &mut [u8], scratch: &mut Vec<u8>) {
        if buf.is_empty() {
            return;
        }
        let (from, blocks) = self.read_blocks(start, start + buf.len() as u64, scratch);
        if let Some(blocks) = blocks {
            let skip = (start - from) as usize;
            buf.copy_from_slice(&blocks[skip..skip + buf.len()]);
            return;
        }
        let end = start + buf.len() as u64;
        let to = self.blocks_end(end);
        let mut head = vec![0; (start - from) as usize];
        let mut tail = vec![0; (to - end) as usize];
        for (bytes, at) in [
            (&mut head[..], from),
            (&mut *buf, start),
            (&mut tail[..], end),
        ] {
            if let Err(e) = self.file.read_exact_at(bytes, at) {
                unreadable(&self.path, e);
            }
        }
        let mut at = from;
        while at < to {
            let block_end = (at + BLOCK).min(to);
            let mut crc = crc32fast::Hasher::new();
            for (bytes, bytes_at) in [(&head[..], from), (&*buf, start), (&tail[..], end)] {
                let lo = at.max(bytes_at) - bytes_at;
                let hi = block_end.min(bytes_at + bytes.len() as u64).max(bytes_at) - bytes_at;
                if lo < hi {
                    crc.update(&bytes[lo as usize..hi as usize]);
                }
            }
            self.check(at, block_end, crc.finalize());
            at = block_end;
        }
    }

    /// The whole blocks over `start..end`, checked, read into `scratch` if they span at most
    /// [`SMALL_READ`] bytes: (their start, `Some(bytes)`); else (their start, `None`).
    fn read_blocks<'a>(
        &self,
        start: u64,
        end: u64,
        scratch: &'a mut Vec<u8>,
    ) -> (u64, Option<&'a mut [u8]>) {
        let from = start / BLOCK * BLOCK;
        let to = self.blocks_end(end);
        if to - from > SMALL_READ {
            return (from, None);
        }
        scratch.resize((to - from) as usize, 0);
        if let Err(e) = self.file.read_exact_at(scratch, from) {
            unreadable(&self.path, e);
        }
        for (i, block) in scratch.chunks(BLOCK as usize).enumerate() {
            let at = from + i as u64 * BLOCK;
            self.check(at, at + block.len() as u64, crc32fast::hash(block));
        }
        (from, Some(&mut scratch[..]))
    }

    /// Where the block holding byte `end - 1` ends: at a block boundary or the end of the file.
    fn blocks_end(&self, end: u64) -> u64 {
        assert!(end <= self.len, "a read within the bytes written");
        end.div_ceil(BLOCK).saturating_mul(BLOCK).min(self.len)
    }

    fn check(&self, at: u64, end: u64, crc: u32) {
        let written = self.crcs[(at / BLOCK) as usize].get();
        if crc != written {
            damaged(&self.path, at, end, crc, written);
        }
    }

    /// Counts `bytes`, just written at the end of the file, into the block checksums.
    fn extend_crcs(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        let partial = self.len % BLOCK;
        if partial != 0 {
            let n = rest.len().min((BLOCK - partial) as usize);
            let last = self.crcs.last().expect("a partial block has a checksum");
            let mut crc = crc32fast::Hasher::new_with_initial(last.get());
            crc.update(&rest[..n]);
            last.set(crc.finalize());
            rest = &rest[n..];
        }
        self.crcs.extend(
            rest.chunks(BLOCK as usize)
                .map(|block| Cell::new(crc32fast::hash(block))),
        );
        self.len += bytes.len() as u64;
    }
}

/// One store's spill files, oldest first.
pub struct Spill {
    dir: Arc<SpillDir>,
    /// By number from `first` on; `None` once deleted.
    files: VecDeque<Option<SpillFile>>,
    first: u64,
    /// The file segments are appended to, if it is still open for that.
    writing: Option<u64>,
    /// The whole blocks of small reads and overwrites, at most [`SMALL_READ`] bytes.
    scratch: RefCell<Vec<u8>>,
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
            scratch: RefCell::new(Vec::new()),
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
                    crcs: Vec::new(),
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
        f.extend_crcs(bytes);
        f.segments += 1;
        self.disk_bytes += bytes.len();
        Ok(disk)
    }

    /// Reads `buf.len()` bytes from `at` in the segment, checked against what was written.
    pub fn read(&self, disk: &Disk, at: usize, buf: &mut [u8]) {
        let f = self.file(disk.file);
        f.read(disk.at + at as u64, buf, &mut self.scratch.borrow_mut());
    }

    /// The whole segment, counted as read back.
    pub fn read_back(&mut self, disk: &Disk) -> Vec<u8> {
        let mut bytes = vec![0; disk.len];
        self.read(disk, 0, &mut bytes);
        self.read_back_total += disk.len as u64;
        bytes
    }

    /// Overwrites bytes of a spilled segment in place: the blocks they fall in are read and
    /// checked first, then their checksums are taken again with the new bytes.
    pub fn write_at(&self, disk: &Disk, at: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let f = self.file(disk.file);
        let start = disk.at + at as u64;
        let end = start + bytes.len() as u64;
        let mut scratch = self.scratch.borrow_mut();
        let (from, Some(blocks)) = f.read_blocks(start, end, &mut scratch) else {
            unreachable!("the store overwrites a few bytes of a header at a time");
        };
        let skip = (start - from) as usize;
        blocks[skip..skip + bytes.len()].copy_from_slice(bytes);
        if let Err(e) = f.file.write_all_at(bytes, start) {
            unreadable(&f.path, e);
        }
        for (i, block) in blocks.chunks(BLOCK as usize).enumerate() {
            f.crcs[(from / BLOCK) as usize + i].set(crc32fast::hash(block));
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

/// Our own file does not hold what we wrote: as [`unreadable`], and never wrong events.
#[cold]
fn damaged(path: &Path, at: u64, end: u64, crc: u32, written: u32) -> ! {
    panic!(
        "spilled join state in {} is not what this host wrote there: bytes {at}..{end} have \
         CRC32 {crc:08x}, written with {written:08x}; another process wrote to the file or it \
         was damaged on disk; the task cannot go on without it (a restart \
         rebuilds it from Kafka)",
        path.display()
    )
}
