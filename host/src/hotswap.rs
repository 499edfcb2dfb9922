//! Swapping the running plugin without a restart: from a watched file (or directory) and from
//! `PUT /plugins`. Both go through [`swap_recorded`], so the metrics count every swap and refusal
//! the same way, and a refused version never replaces the running one.

use crate::stoppable::StoppableThread;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::metrics::Metrics;
use crate::plugin::{LoadError, PluginRegistry, PluginVersion};
use crate::report::Happened;

/// Swaps `bytes` in as plugin `name` and counts the outcome; `source` names where they came
/// from, for the log.
pub fn swap_recorded(
    registry: &PluginRegistry,
    metrics: &Metrics,
    bytes: &[u8],
    name: &str,
    source: &str,
) -> Result<Arc<PluginVersion>, LoadError> {
    let before = registry.current().generation;
    match registry.swap_named(bytes, name) {
        Ok(version) => {
            if version.generation != before {
                Happened::PluginSwapped {
                    label: &version.label,
                    generation: version.generation,
                    source,
                }
                .emit(metrics);
            }
            Ok(version)
        }
        Err(e) => {
            Happened::SwapRefused {
                name,
                running: &registry.current().label,
                source,
                error: &e,
            }
            .emit(metrics);
            Err(e)
        }
    }
}

/// The plugin file a configured path means: the path itself, or for a directory its newest
/// `.wasm` file (so a deploy can rename a new version in next to the old one).
pub fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_owned());
    }
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "wasm") && entry.file_type()?.is_file() {
            let modified = entry.metadata()?.modified()?;
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, p));
            }
        }
    }
    newest.map(|(_, p)| p).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no .wasm file in plugin directory {path:?}"),
        )
    })
}

/// What identifies a version of the file on disk without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    file: PathBuf,
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let file = resolve(path).ok()?;
    let meta = std::fs::metadata(&file).ok()?;
    Some(Stamp {
        file,
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Polls the plugin path; a change that then stays unchanged for `debounce` is swapped in.
/// Polling (not inotify) sees writes in place and renames alike, on every filesystem.
pub struct FileWatch(#[allow(dead_code)] StoppableThread);

impl FileWatch {
    pub fn start(
        path: PathBuf,
        registry: Arc<PluginRegistry>,
        metrics: Arc<Metrics>,
        poll: Duration,
        debounce: Duration,
    ) -> FileWatch {
        let thread = StoppableThread::spawn("plugin-watch", move |flag| {
            let mut seen = stamp(&path);
            // A change waits here until it has been stable for `debounce`.
            let mut pending: Option<(Stamp, std::time::Instant)> = None;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(poll);
                let now = stamp(&path);
                if now == seen {
                    pending = None;
                    continue;
                }
                let Some(now) = now else { continue };
                match &pending {
                    Some((p, since)) if *p == now => {
                        if since.elapsed() >= debounce {
                            match std::fs::read(&now.file) {
                                Ok(bytes) => {
                                    let source = now.file.display().to_string();
                                    let name = crate::plugin::plugin_name(&now.file);
                                    let _ =
                                        swap_recorded(&registry, &metrics, &bytes, &name, &source);
                                }
                                Err(e) => {
                                    tracing::error!("cannot read plugin file {:?}: {e}", now.file)
                                }
                            }
                            // Refused or not, this stamp is dealt with; the next write retries.
                            seen = Some(now);
                            pending = None;
                        }
                    }
                    _ => pending = Some((now, std::time::Instant::now())),
                }
            }
        })
        .expect("spawning the plugin watcher");
        FileWatch(thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_means_its_newest_wasm_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(resolve(dir.path())
            .unwrap_err()
            .to_string()
            .contains("no .wasm file"));
        let old = dir.path().join("a.wasm");
        std::fs::write(&old, b"1").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let new = dir.path().join("b.wasm");
        std::fs::write(&new, b"2").unwrap();
        assert_eq!(resolve(dir.path()).unwrap(), new);
        assert_eq!(resolve(&old).unwrap(), old);
    }
}
