//! The checks a parsed file passes before anything connects: bounds of single fields and rules
//! across fields and sections. Each refusal names the field and suggests a fix.

use std::time::Duration;

use super::join::MAX_PARTITIONS;
use super::memory::MIN_QUEUE_BYTES;
use super::{
    Config, ConfigError, FailurePolicy, GroupProtocol, Guarantee, Kind, RecordPolicy,
    RepartitionPolicy, TombstonePolicy, CLASSIC_ONLY_OPTIONS, MAX_MEMORY_MIB, MAX_RETRIES,
};

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);

impl Config {
    /// `max.poll.interval.ms` as `kafka.options` sets it, or librdkafka's default.
    fn max_poll_interval(&self) -> Duration {
        self.kafka
            .options
            .get("max.poll.interval.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .map_or(DEFAULT_MAX_POLL_INTERVAL, Duration::from_millis)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, problem: &str, fix| {
            Err(ConfigError::Invalid {
                field,
                problem: problem.to_owned(),
                fix,
            })
        };
        if self.kafka.bootstrap_servers.trim().is_empty() {
            return invalid(
                "kafka.bootstrap_servers",
                "is empty",
                "give host:port of at least one broker",
            );
        }
        if self.kafka.group_id.trim().is_empty() {
            return invalid(
                "kafka.group_id",
                "is empty",
                "name the consumer group all hosts of this join share",
            );
        }
        for set in ["group.protocol", "group.remote.assignor"] {
            if self.kafka.options.contains_key(set) {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which cojoin sets itself"),
                    "remove it and set kafka.group_protocol = \"auto\", \"consumer\" or \"classic\"",
                );
            }
        }
        if self.kafka.group_protocol == GroupProtocol::Consumer {
            if let Some(set) = CLASSIC_ONLY_OPTIONS
                .iter()
                .find(|o| self.kafka.options.contains_key(**o))
            {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which the consumer group protocol (KIP-848) does not have: the broker decides it (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms)"),
                    "remove it, or set kafka.group_protocol = \"classic\"",
                );
            }
        }
        let n_way = self.join.topics.len() > 2;
        let (left, right) = match n_way {
            false => ("join.left", "join.right"),
            true => ("join.topics", "join.topics"),
        };
        for (i, topic) in self.join.topics.iter().enumerate() {
            if topic.trim().is_empty() {
                return invalid(
                    [left, right][i.min(1)],
                    "names an empty topic",
                    "name the topic to join",
                );
            }
            if self.join.topics[..i].contains(topic) {
                return invalid(
                    right,
                    &format!("names {topic:?} twice"),
                    "join different topics",
                );
            }
        }
        if n_way && self.join.kind == Kind::Outer {
            return invalid(
                "join.kind",
                "is \"outer\" with three topics or more",
                "use \"inner\" or \"left\" (left keeps the first topic's unmatched events, with the partners they found)",
            );
        }
        if self.join.repartition == RepartitionPolicy::Never {
            let key_field = |i: usize| match (n_way, i) {
                (false, 0) => "join.left_key",
                (false, _) => "join.right_key",
                (true, _) => "join.keys",
            };
            for (i, selector) in self.join.selectors.iter().enumerate() {
                let field = key_field(i);
                if !selector.is_record_key() {
                    return invalid(
                        field,
                        &format!("is {selector}, a field of the value, which needs repartitioning, but join.repartition is \"never\""),
                        "set join.repartition = \"auto\", or key the records by that field when producing them",
                    );
                }
            }
        }
        if self.join.partitions == Some(0) {
            return invalid(
                "join.partitions",
                "is zero",
                "give the internal topics' partition count, e.g. 6, or leave it out",
            );
        }
        // 100000 was taken: as many internal partitions on the broker, and as many tasks.
        if let Some(n) = self.join.partitions.filter(|n| *n > MAX_PARTITIONS) {
            return invalid(
                "join.partitions",
                &format!("is {n}, more than {MAX_PARTITIONS} (each is a partition of every internal topic on the broker and a task on some host)"),
                "give the internal topics' partition count, e.g. the input topics' count, or leave it out",
            );
        }
        if self.join.window.is_zero() && self.join.table.is_none() {
            return invalid(
                "join.window",
                "is missing or zero",
                "give the largest timestamp difference of a match, e.g. \"5m\"",
            );
        }
        if self.plugin.memory_mib == 0 {
            return invalid(
                "plugin.memory_mib",
                "is zero",
                "give a cap in MiB, e.g. 256",
            );
        }
        if self.plugin.memory_mib > MAX_MEMORY_MIB {
            // Checked before it becomes bytes: a larger number shifted into bytes wrapped around
            // to a tiny cap (17592186044417 MiB became 1 MiB) and was accepted.
            return invalid(
                "plugin.memory_mib",
                &format!(
                    "is {} MiB, more than a 32-bit Wasm memory can address ({MAX_MEMORY_MIB} MiB)",
                    self.plugin.memory_mib
                ),
                "give a cap in MiB up to 4096, e.g. 256",
            );
        }
        if self.plugin.workers == Some(0) {
            return invalid(
                "plugin.workers",
                "is zero",
                "give the number of threads running tasks, e.g. 2, or leave it out for one per core",
            );
        }
        if self.plugin.deadline.is_zero() {
            return invalid(
                "plugin.deadline",
                "is zero",
                "give a per-call deadline, e.g. \"500ms\"",
            );
        }
        if self.plugin.retries > MAX_RETRIES {
            return invalid(
                "plugin.retries",
                &format!(
                    "is {}, more than {MAX_RETRIES} (a failed call is made again that many times before its inputs are dead-lettered)",
                    self.plugin.retries
                ),
                "give at most 100 retries, e.g. 2",
            );
        }
        if self.plugin.backoff > super::MAX_BACKOFF {
            return invalid(
                "plugin.backoff",
                &format!(
                    "is {:?}, more than the {:?} a retry waits at most (the backoff doubles up to that)",
                    self.plugin.backoff,
                    super::MAX_BACKOFF
                ),
                "give the wait before the first retry, at most \"30s\", e.g. \"100ms\"",
            );
        }
        let worst = self.plugin.worst_case_per_record();
        let max_poll = self.max_poll_interval();
        if worst > max_poll {
            return invalid(
                "plugin.retries",
                &format!(
                    "is {} with plugin.backoff = {:?} and plugin.deadline = {:?}: one record may be held {worst:?} (the backoffs, doubling up to {:?}, plus {} calls of up to the deadline) before its inputs are dead-lettered, longer than max.poll.interval.ms ({max_poll:?}), Kafka's bound on how long a consumer may take over a record it polled. The task waits off its worker (the other tasks go on), but its partitions commit nothing past that record meanwhile",
                    self.plugin.retries,
                    self.plugin.backoff,
                    self.plugin.deadline,
                    super::MAX_BACKOFF,
                    u64::from(self.plugin.retries) + 1,
                ),
                "lower plugin.retries, plugin.backoff or plugin.deadline (or raise max.poll.interval.ms in kafka.options)",
            );
        }
        if self.output.topic.trim().is_empty() {
            return invalid(
                "output.topic",
                "is empty",
                "name the topic plugin records go to by default",
            );
        }
        let inputs = [&self.join.left, &self.join.right];
        let named = [
            ("output.topic", Some(&self.output.topic)),
            (
                "output.dead_letter_topic",
                self.output.dead_letter_topic.as_ref(),
            ),
        ];
        for (field, topic) in named {
            if let Some(topic) = topic.filter(|t| inputs.contains(t)) {
                return invalid(
                    field,
                    &format!("is {topic:?}, an input topic of the join (it would feed the join its own records)"),
                    "name a topic other than join.left and join.right",
                );
            }
        }
        if let Some(topic) = self
            .output
            .allowed_topics
            .iter()
            .flatten()
            .find(|t| inputs.contains(t))
        {
            return invalid(
                "output.allowed_topics",
                &format!("lists {topic:?}, an input topic of the join (it would feed the join its own results)"),
                "leave join.left and join.right out of it",
            );
        }
        if self.admin.enabled {
            let Ok(addr) = self.admin.bind.parse::<std::net::SocketAddr>() else {
                return invalid(
                    "admin.bind",
                    "is not an address",
                    "give ip:port, e.g. \"127.0.0.1:9464\" (port 0 picks a free one)",
                );
            };
            let token = self.admin.token.as_ref().map(|t| t.expose().trim());
            if !addr.ip().is_loopback() && token.is_none_or(str::is_empty) {
                // An empty token would let any request with `Authorization: Bearer ` through.
                return invalid(
                    "admin.token",
                    "is missing or empty but admin.bind is not a loopback address (anyone who reaches it could swap the plugin)",
                    "set admin.token to a secret, or bind to 127.0.0.1",
                );
            }
            self.admin.tls_files()?;
        }
        let dead_letters = self.join.late == RecordPolicy::DeadLetter
            || self.join.null_keys == RecordPolicy::DeadLetter
            || self.join.tombstones == TombstonePolicy::DeadLetter
            || self.plugin.failure == FailurePolicy::DeadLetter;
        if dead_letters && self.output.dead_letter_topic.is_none() {
            return invalid(
                "output.dead_letter_topic",
                "is missing but a policy is dead-letter (the defaults for join.late, join.null_keys and plugin.failure are)",
                "set output.dead_letter_topic, or set those policies to drop / halt",
            );
        }
        if self.output.commit_interval().is_zero() {
            return invalid(
                "output.commit_interval",
                "is zero",
                "give the time between commits, e.g. \"100ms\" or \"1s\"",
            );
        }
        if self.memory.queue_bytes < MIN_QUEUE_BYTES {
            return invalid(
                "memory.queue_bytes",
                &format!(
                    "is {} bytes, below the 4 MiB a host needs to hold a few records per partition",
                    self.memory.queue_bytes
                ),
                "give at least \"4MiB\" (e.g. \"64MiB\")",
            );
        }
        if self.output.guarantee == Guarantee::ExactlyOnce {
            if let Some(set) = ["transactional.id", "enable.idempotence", "isolation.level"]
                .iter()
                .find(|o| self.kafka.options.contains_key(**o))
            {
                return invalid(
                    "kafka.options",
                    &format!("sets {set:?}, which output.guarantee = \"exactly-once\" sets itself"),
                    "remove it",
                );
            }
        }
        Ok(())
    }
}
