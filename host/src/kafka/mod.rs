//! The Kafka side. [`client`] configures the librdkafka clients (with [`tls`] and the secrets);
//! [`source`] is the consumer (records, rebalances, pauses, seeks, end offsets, commits), and
//! [`intake`] the one owner of the consumer side (the source, tasks paired from its partitions,
//! what is paused, records polled ahead) that feeds the run loop's tasks;
//! [`sink`] the producer (outputs, dead letters, acknowledgements, refusals), with
//! [`transaction`] for exactly-once and [`acks`] for waiting on deliveries; [`repartitioner`]
//! is the step that re-keys a side into an internal topic; [`authz`] and [`describe`] check the
//! ACLs a config needs; [`quiet`] keeps librdkafka's repeated complaints to one line;
//! [`timeouts`] says how long each wait on the broker may take. The run loop ([`crate::run`])
//! ties them to the tasks. The pure parts: co-partitioning checks on metadata and assignments
//! ([`assignment`]), tasks following partitions as the group moves them ([`pairing`]), the group
//! protocol's choice ([`protocol`]), and the producer partitioners whose mismatch breaks a join
//! ([`partitioner`]). Nothing here imports the plugin runtime.

pub mod acks;
pub mod assignment;
pub mod authz;
pub mod client;
pub mod describe;
pub mod global_table;
pub mod intake;
pub mod pairing;
pub mod partitioner;
pub mod protocol;
pub mod quiet;
pub mod repartitioner;
pub mod sink;
pub mod source;
pub mod timeouts;
pub mod tls;
pub mod transaction;
