//! Whether a cache directory or entry may be believed. Compiled code read from the cache runs as
//! native code outside the Wasm sandbox, so an entry is only used when nobody but this process's
//! own user could have written it: the directory and the entry belong to the effective user, and
//! neither is writable by group or others. Anything else is refused, never repaired behind the
//! operator's back: they chose that directory, and the warning tells them how to fix it.
//!
//! [`untrusted`] is the pure rule; [`Trust`] applies it to the file system and warns once.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Group and other write bits.
const GROUP_OTHER_WRITE: u32 = 0o022;

/// Why `path` (owned by `owner`, with permission bits `mode`) must not be trusted by a process
/// whose effective user is `euid`; `None` when it may be. The reason names the path, its owner and
/// mode, and the fix.
pub(crate) fn untrusted(path: &Path, owner: u32, mode: u32, euid: u32) -> Option<String> {
    let mode = mode & 0o7777;
    if owner != euid {
        return Some(format!(
            "{} is owned by uid {owner} (mode {mode:04o}), not by this process's user (uid {euid}), \
             so another user could plant native code in it: `chown {euid} {}` (or remove it and \
             let cojoin recreate it), or set another cache directory",
            path.display(),
            path.display(),
        ));
    }
    if mode & GROUP_OTHER_WRITE != 0 {
        return Some(format!(
            "{} is writable by group or others (owner uid {owner}, mode {mode:04o}), so they could \
             plant native code in it: `chmod go-w {}`, or set another cache directory",
            path.display(),
            path.display(),
        ));
    }
    None
}

/// The effective user of this process: the one whose files we may believe.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() }
}

/// Applies [`untrusted`] for one cache and logs the first refusal as a warning (later ones at
/// debug): a misconfigured directory refuses every entry, and one line tells the operator.
pub(crate) struct Trust {
    /// What the cache holds, for the log line ("compiled-component", "compiled-function").
    what: &'static str,
    euid: u32,
    warned: AtomicBool,
}

impl Trust {
    pub(crate) fn new(what: &'static str) -> Self {
        Trust {
            what,
            euid: effective_uid(),
            warned: AtomicBool::new(false),
        }
    }

    /// Whether the directory `dir` may be read from and written to.
    pub(crate) fn dir(&self, dir: &Path) -> bool {
        match std::fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => {
                self.refuse(&format!(
                    "{} is not a directory: set another cache directory",
                    dir.display()
                ));
                false
            }
            Ok(meta) => self.check(dir, &meta),
            Err(e) => {
                self.refuse(&format!(
                    "cannot inspect {}: {e}: check that it exists and is readable, or set \
                     another cache directory",
                    dir.display()
                ));
                false
            }
        }
    }

    /// Whether the entry at `path`, with metadata `meta` (taken from the open file, so it
    /// describes what will be read), may be used.
    pub(crate) fn entry(&self, path: &Path, meta: &Metadata) -> bool {
        if !meta.is_file() {
            self.refuse(&format!(
                "{} is not a regular file: remove it",
                path.display()
            ));
            return false;
        }
        self.check(path, meta)
    }

    fn check(&self, path: &Path, meta: &Metadata) -> bool {
        match untrusted(path, meta.uid(), meta.mode(), self.euid) {
            None => true,
            Some(reason) => {
                self.refuse(&reason);
                false
            }
        }
    }

    fn refuse(&self, reason: &str) {
        if self.warned.swap(true, Ordering::Relaxed) {
            tracing::debug!("{} cache not used: {reason}", self.what);
        } else {
            tracing::warn!(
                "{} cache not used (compiling instead; further refusals are logged at debug): {reason}",
                self.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_writing_alone_is_trusted() {
        let p = Path::new("/c");
        assert_eq!(untrusted(p, 1000, 0o40700, 1000), None);
        assert_eq!(untrusted(p, 1000, 0o100644, 1000), None);
        assert_eq!(untrusted(p, 0, 0o700, 0), None);

        let group = untrusted(p, 1000, 0o40770, 1000).unwrap();
        assert!(
            group.contains("/c is writable by group or others"),
            "{group}"
        );
        assert!(group.contains("mode 0770"), "{group}");
        assert!(group.contains("`chmod go-w /c`"), "{group}");
        assert!(untrusted(p, 1000, 0o702, 1000).is_some());
        // Sticky /tmp-like modes are still writable by others.
        assert!(untrusted(p, 1000, 0o1777, 1000).is_some());

        let other = untrusted(p, 0, 0o755, 1000).unwrap();
        assert!(other.contains("owned by uid 0"), "{other}");
        assert!(other.contains("`chown 1000 /c`"), "{other}");
    }

    #[test]
    fn a_group_writable_directory_is_refused_and_a_private_one_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let trust = Trust::new("test");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(trust.dir(dir.path()));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(!trust.dir(dir.path()));
        assert!(!trust.dir(&dir.path().join("missing")));
    }
}
