//! `[output]`: where plugin records and dead letters go, the delivery guarantee and the codec.

use std::time::Duration;

use serde::Deserialize;

use super::units::optional_duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Topic for plugin records that name none. Required.
    pub topic: String,
    /// Topic for dead letters; required when any policy is `dead-letter`. Default: none.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// When set, the only topics besides `topic` a plugin record may name; others are refused
    /// (their inputs dead-lettered as `output-refused`). Default: any topic but the join's inputs.
    #[serde(default)]
    pub allowed_topics: Option<Vec<String>>,
    /// `at-least-once` (outputs produced, then offsets committed) or `exactly-once` (outputs and
    /// offsets in one Kafka transaction per commit interval). Default: `at-least-once`.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// How often offsets are committed (with exactly-once: how often a transaction is committed,
    /// which is the latency a `read_committed` reader sees). Default: `"1s"`, or `"100ms"` with
    /// exactly-once (as Kafka Streams).
    #[serde(default, with = "optional_duration")]
    pub commit_interval: Option<Duration>,
    /// The codec of every batch cojoin writes: outputs, dead letters and the repartition step's
    /// internal topics (librdkafka's `compression.type`, which `kafka.options` may still set and
    /// then wins). Inputs are read whatever codec wrote them. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
}

/// A producer's codec, as librdkafka (and the Java client) name it.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    /// The value of librdkafka's `compression.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// What a downstream reader can count on.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// A crash repeats the outputs made since the last commit.
    #[default]
    AtLeastOnce,
    /// Outputs and the input offsets they come from are committed together: a `read_committed`
    /// reader sees each output once, even across crashes and rebalances.
    ExactlyOnce,
}

impl OutputConfig {
    /// The commit interval in force: the configured one, else the guarantee's default.
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval.unwrap_or(match self.guarantee {
            Guarantee::AtLeastOnce => Duration::from_secs(1),
            Guarantee::ExactlyOnce => Duration::from_millis(100),
        })
    }
}
