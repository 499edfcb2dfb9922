//! The config turned into what the pure parts take: a task's policy and a plugin's limits. One
//! place, so that `run`, `plugin test` and `check` read the same settings the same way.

use crate::config::Config;
use crate::join::JoinWindow;
use crate::plugin::PluginLimits;
use crate::task::TaskPolicy;

/// Builds a task policy from the config.
pub fn task_policy(config: &Config) -> TaskPolicy {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let table = config.join.table.as_ref();
    TaskPolicy {
        // A table join has no window; its history is how far ahead of an idle table a stream
        // record may be taken (further, and the table's next updates would come too old).
        window: JoinWindow {
            window_ms: ms(table.map_or(config.join.window, |t| t.history)),
            grace_ms: ms(config.join.grace),
        },
        kind: config.join.kind.into(),
        max_idle_ms: ms(config.join.max_idle),
        max_future_ms: ms(config.join.max_future),
        late: config.join.late,
        null_keys: config.join.null_keys,
        tombstones: config.join.tombstones,
        failure: config.plugin.failure,
        retries: config.plugin.retries,
        backoff: config.plugin.backoff,
        outputs: crate::task::OutputTopics {
            inputs: config.join.topics.clone(),
            internal: (config.join.topics.iter())
                .map(|t| crate::repartition::internal_topic(&config.kafka.group_id, t))
                .collect(),
            allowed: config.output.allowed_topics.clone(),
        },
        // A global table is the run loop's to read and hand over (run/setup.rs).
        table: (table)
            .filter(|_| !config.join.table_is_global())
            .map(|t| crate::task::TableJoin::CoPartitioned(t.mode())),
    }
}

/// The limits of every instance of the configured plugin.
pub fn plugin_limits(config: &Config) -> PluginLimits {
    PluginLimits {
        deadline: config.plugin.deadline,
        memory_bytes: config.plugin.memory_mib << 20,
        fuel: config.plugin.fuel,
        ..PluginLimits::default()
    }
}
