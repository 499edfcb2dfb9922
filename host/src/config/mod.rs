//! The host's configuration file (TOML): every field documented with its default, unknown fields
//! refused, and everything validated before anything connects. Pure: parsing and checks only.
//!
//! ```toml
//! [kafka]
//! bootstrap_servers = "localhost:9092"
//! group_id = "orders-payments"
//! # instance_id = "host-1"            # static membership: stable assignment across restarts
//! # group_protocol = "auto"           # auto | consumer (KIP-848) | classic
//! [kafka.options]                     # raw librdkafka options, applied last
//! "fetch.wait.max.ms" = "100"
//!
//! [join]
//! left = "orders"
//! right = "payments"
//! kind = "left"                       # inner | left | outer
//! window = "5m"
//! grace = "30s"
//!
//! [plugin]
//! path = "build/plugins/order_paid_python.wasm"
//! failure = "dead-letter"             # dead-letter | halt
//!
//! [output]
//! topic = "orders-paid"
//! dead_letter_topic = "orders-payments-dlq"
//! # allowed_topics = ["audit"]        # other topics a plugin record may name (default: any but the inputs)
//! # compression = "zstd"              # none | gzip | snappy | lz4 | zstd: batches cojoin writes
//!
//! [memory]
//! # queue_bytes = "64MiB"             # records consumed, not yet joined (partitions pause beyond)
//! # state_bytes = "1GiB"              # join state in RAM; beyond it, oldest events go to state.dir
//!
//! [state]
//! # dir = "/var/lib/cojoin"           # spilled join state (a cache; default: the system temp dir)
//! ```
//!
//! Layout: this module holds the file as a whole (`Config`), its errors and its parsing; one
//! submodule per section (`kafka`, `join`, `plugin`, `output`, `admin`, `memory` with `[state]`)
//! holds that section's fields and defaults; `units` reads durations and byte sizes;
//! `validate` holds every check run once the file has parsed.

mod admin;
mod join;
mod kafka;
mod memory;
mod output;
mod plugin;
mod table;
#[cfg(test)]
mod tests;
mod units;
mod validate;

use std::path::PathBuf;

use serde::Deserialize;

pub use admin::{AdminConfig, AdminTlsFiles};
pub use join::{JoinConfig, KeySelector, Kind, RecordPolicy, RepartitionPolicy, TombstonePolicy};
pub use kafka::{GroupProtocol, KafkaConfig, CLASSIC_ONLY_OPTIONS};
pub use memory::{MemoryConfig, StateConfig};
pub use output::{Compression, Guarantee, OutputConfig};
pub use plugin::{
    backoff_before, FailurePolicy, PluginConfig, MAX_BACKOFF, MAX_MEMORY_MIB, MAX_RETRIES,
};
pub use table::{TableConfig, TableModeSetting, TableScope};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    // The cause is in the message, not an error `source` (which `{:#}` would print again).
    #[error("cannot read config file {path:?}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path:?}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config field `{field}`: {problem}; {fix}")]
    Invalid {
        field: &'static str,
        problem: String,
        fix: &'static str,
    },
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub join: JoinConfig,
    pub plugin: PluginConfig,
    pub output: OutputConfig,
    /// Admin HTTP server. Default: on, loopback, port 9464.
    #[serde(default)]
    pub admin: AdminConfig,
    /// What the host may hold in memory of the records it reads.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// Where join state beyond `memory.state_bytes` goes.
    #[serde(default)]
    pub state: StateConfig,
}

/// The `default` of a boolean that is on unless turned off.
fn yes() -> bool {
    true
}

/// Where in the file and what is wrong, without the excerpt of the file that toml's own message
/// quotes: the line may hold an inline password.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before.len() - line_start + 1;
            // Name the field (its table and key), never its value.
            let table = before[..line_start]
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| l.starts_with('['))
                .unwrap_or("");
            let this_line = text[line_start..].lines().next().unwrap_or("");
            let field = match this_line.split_once('=') {
                Some((key, _)) if !key.trim().starts_with('[') => format!("{table} {}", key.trim()),
                _ => table.to_owned(),
            };
            format!(
                "line {line}, column {column} ({}): {}",
                field.trim(),
                e.message().trim_end()
            )
        }
        None => e.message().trim_end().to_owned(),
    }
}

impl Config {
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::new(),
            message: parse_error(text, &e),
        })?;
        config.join.resolve_defaults();
        (config.join.resolve_table())
            .and_then(|()| config.join.resolve_topics())
            .and_then(|()| config.join.validate_table())
            .map_err(|(field, problem, fix)| ConfigError::Invalid {
                field,
                problem,
                fix,
            })?;
        config.validate()?;
        Ok(config)
    }
}
