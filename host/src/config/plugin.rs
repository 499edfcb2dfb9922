//! `[plugin]`: the component, its limits (deadline, memory, fuel), retries and workers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::units::duration;
use super::yes;

/// The most a retry waits: the backoff doubles up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before retry `retry` (1: the first) of a failed call: `backoff`, doubled for each
/// retry after the first, up to [`MAX_BACKOFF`].
pub fn backoff_before(backoff: Duration, retry: u32) -> Duration {
    let doublings = retry.saturating_sub(1).min(31);
    backoff.saturating_mul(1u32 << doublings).min(MAX_BACKOFF)
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// Retry, then copy the inputs to the dead-letter topic with the error in headers.
    #[default]
    DeadLetter,
    /// Retry, then stop the task (pause its partitions); other tasks keep running.
    Halt,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// The plugin component (`.wasm`). Required.
    pub path: PathBuf,
    /// Per-call deadline. Default: `"500ms"`.
    #[serde(default = "default_deadline", with = "duration")]
    pub deadline: Duration,
    /// Memory cap per instance in MiB. Default: 256.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: usize,
    /// Fuel per call; turns fuel metering on. Default: none.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// After a failed call: `dead-letter` or `halt`. Default: `dead-letter`.
    #[serde(default)]
    pub failure: FailurePolicy,
    /// Attempts after the first failed one, at most [`MAX_RETRIES`]. Default: 2.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Wait before the first retry; doubles each time, up to [`MAX_BACKOFF`] (30 s).
    /// The task waits off its worker. Default: `"100ms"`.
    #[serde(default = "default_backoff", with = "duration")]
    pub backoff: Duration,
    /// Passed to the plugin's `init`. Default: empty.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Threads that run tasks, each with its own plugin instance (and its own `memory_mib`).
    /// Default: the machine's cores.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Watch `path` and swap in a new file (written in place or renamed in) without a restart.
    /// When `path` is a directory, its newest `.wasm` file is the plugin. Default: true.
    #[serde(default = "yes")]
    pub watch: bool,
}

impl PluginConfig {
    /// `workers`, or the machine's cores.
    pub fn workers(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The longest one record may be held by a call that keeps failing before its inputs are
    /// dead-lettered (or its task halts): every backoff, plus every attempt taking its deadline.
    pub fn worst_case_per_record(&self) -> Duration {
        let backoffs = (1..=self.retries)
            .map(|retry| backoff_before(self.backoff, retry))
            .fold(Duration::ZERO, Duration::saturating_add);
        backoffs.saturating_add(self.deadline.saturating_mul(self.retries.saturating_add(1)))
    }
}

/// The most retries of a failed call `plugin.retries` may ask for.
pub const MAX_RETRIES: u32 = 100;

fn default_deadline() -> Duration {
    Duration::from_millis(500)
}
/// The most memory a plugin instance may be given: wasm32 addresses 4 GiB.
pub const MAX_MEMORY_MIB: usize = 4096;

fn default_memory_mib() -> usize {
    256
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> Duration {
    Duration::from_millis(100)
}
