//! `[memory]` budgets and `[state]`, the directory join state beyond them spills to.

use std::path::PathBuf;

use serde::Deserialize;

use super::units::byte_size;

/// Memory budgets, per host, over all its tasks. The host's fixed overhead (plugin instances,
/// librdkafka, code) comes on top; README "Memory" gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Records consumed but not processed yet, librdkafka's prefetch included. A task whose
    /// queue passes its share has its partitions paused until it drains. Default `"64MiB"`.
    #[serde(default = "default_queue_bytes", with = "byte_size")]
    pub queue_bytes: u64,
    /// Join state kept in RAM; beyond it the oldest events move to files under `state.dir` and are
    /// read back when probed or expired. Default `"1GiB"`; 0 puts every full segment on disk.
    #[serde(default = "default_state_bytes", with = "byte_size")]
    pub state_bytes: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            queue_bytes: default_queue_bytes(),
            state_bytes: default_state_bytes(),
        }
    }
}

fn default_queue_bytes() -> u64 {
    64 << 20
}
fn default_state_bytes() -> u64 {
    1 << 30
}
/// Below this the queues cannot hold a few ordinary records per partition. `state_bytes` has no
/// floor: a tiny one only makes the join slower (every full segment of state goes to disk).
pub(super) const MIN_QUEUE_BYTES: u64 = 4 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory for spilled join state (a cache: state is rebuilt from Kafka on restart).
    /// Default: `cojoin-state` in the system temp dir.
    #[serde(default)]
    pub dir: Option<PathBuf>,
}

impl StateConfig {
    pub fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("cojoin-state"))
    }
}
