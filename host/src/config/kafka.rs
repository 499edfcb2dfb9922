//! `[kafka]`: the brokers, the consumer group and the raw librdkafka options.

use serde::Deserialize;

use crate::secret::Options;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list. Required.
    pub bootstrap_servers: String,
    /// Consumer group shared by every host of this join. Required.
    pub group_id: String,
    /// Static membership (`group.instance.id`): a restarted host gets its tasks back without a
    /// rebalance. Default: none.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The consumer group protocol. Default: `auto`.
    #[serde(default)]
    pub group_protocol: GroupProtocol,
    /// Raw librdkafka options, applied after cojoin's own (so they win); a value may come from
    /// the environment or a file, `{ env = "NAME" }` / `{ file = "/path" }` (see
    /// [`crate::secret`]). Default: none.
    #[serde(default)]
    pub options: Options,
}

/// How the group assigns partitions to hosts.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum GroupProtocol {
    /// The new protocol where the broker enables it (Apache Kafka 4.0 and later), else classic.
    #[default]
    Auto,
    /// KIP-848: the broker assigns with its sticky, co-partitioning `range` assignor, and moves
    /// partitions one at a time; tasks that stay keep running through a rebalance.
    Consumer,
    /// librdkafka's eager `range` assignor: every rebalance stops and restarts every task.
    Classic,
}

/// librdkafka options the new group protocol does not have (the broker owns them); set with
/// them, librdkafka refuses to create the consumer.
pub const CLASSIC_ONLY_OPTIONS: [&str; 4] = [
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
];
