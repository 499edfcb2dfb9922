//! `[join.table]`: the join's right side read as a table (issue 33): a topic, normally compacted,
//! whose records are upserts by key (a tombstone deletes the key), joined with each record of the
//! left topic (the stream) by its key, as of the stream record's timestamp (`versioned`) or as the
//! table stands when it is processed (`latest`). Kafka Streams' KStream–KTable join.

use std::time::Duration;

use serde::Deserialize;

use super::join::{JoinConfig, Kind, RepartitionPolicy};
use super::units::duration;
use crate::join::table::TableMode;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// The table's topic: `b` in `on-match`, the right side of the join. Required.
    pub topic: String,
    /// `versioned` (the row as of the stream record's timestamp) or `latest` (the row the table
    /// holds when the record is processed). Default: `versioned`; `latest` for a global table,
    /// the only mode it has. Resolved from `mode_setting` by `resolve_table`.
    #[serde(skip)]
    pub mode: TableModeSetting,
    /// `mode` as written, `None` when left out.
    #[serde(default, rename = "mode")]
    mode_setting: Option<TableModeSetting>,
    /// `co-partitioned`: task p holds partition p of the table, as of a stream; the stream is
    /// re-keyed to the table's partitions when it must be. `global`: every host reads every
    /// partition of the table into one view its tasks share, so the stream is read as it is
    /// (Kafka Streams' GlobalKTable): for dimension tables up to millions of rows. Default:
    /// `co-partitioned`.
    #[serde(default)]
    pub scope: TableScope,
    /// Versioned: how far behind stream time a stream record may look back; one stamped earlier
    /// is joined with no row (counted in `cojoin_table_too_old`), and an update stamped earlier
    /// is dropped. Default: `"1h"`.
    #[serde(default = "default_history", with = "duration")]
    pub history: Duration,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TableModeSetting {
    #[default]
    Versioned,
    Latest,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TableScope {
    #[default]
    CoPartitioned,
    Global,
}

fn default_history() -> Duration {
    Duration::from_secs(3600)
}

impl TableConfig {
    /// The table side's mode, as the join state takes it.
    pub fn mode(&self) -> TableMode {
        match self.mode {
            TableModeSetting::Versioned => TableMode::Versioned {
                history_retention_ms: i64::try_from(self.history.as_millis()).unwrap_or(i64::MAX),
            },
            TableModeSetting::Latest => TableMode::Latest,
        }
    }
}

type Refusal = (&'static str, String, &'static str);

impl JoinConfig {
    /// Whether the join's table is global: the group reads the stream alone, and every host the
    /// whole table.
    pub fn table_is_global(&self) -> bool {
        self.table
            .as_ref()
            .is_some_and(|t| t.scope == TableScope::Global)
    }

    /// A table join's right side is its table: `join.right` is `join.table.topic` (left out, or
    /// the same name), keyed by its records' keys. Refuses what a table join cannot do. Called
    /// before the topics are resolved.
    pub(super) fn resolve_table(&mut self) -> Result<(), Refusal> {
        let Some(table) = &mut self.table else {
            return Ok(());
        };
        let global = table.scope == TableScope::Global;
        table.mode = match table.mode_setting {
            Some(TableModeSetting::Versioned) if global => {
                return Err((
                    "join.table.mode",
                    "is \"versioned\" with scope = \"global\"".to_owned(),
                    "a global table joins with its latest row (as Kafka Streams' GlobalKTable): leave join.table.mode out, or use scope = \"co-partitioned\" for joins as of the record's timestamp",
                ));
            }
            Some(mode) => mode,
            None if global => TableModeSetting::Latest,
            None => TableModeSetting::Versioned,
        };
        let table = &*table;
        if table.topic.trim().is_empty() {
            return Err((
                "join.table.topic",
                "is empty".to_owned(),
                "name the table's topic (a compacted topic keyed by the join key)",
            ));
        }
        if !self.topics.is_empty() {
            return Err((
                "join.topics",
                "is set with join.table".to_owned(),
                "a table joins one stream: give the stream as join.left and the table as join.table.topic",
            ));
        }
        if !self.right.is_empty() && self.right != table.topic {
            return Err((
                "join.right",
                format!(
                    "names {:?} while join.table.topic names {:?}",
                    self.right, table.topic
                ),
                "leave join.right out: the table is the join's right side",
            ));
        }
        if !self.right_key.is_record_key() {
            return Err((
                "join.right_key",
                format!("is {} with join.table", self.right_key),
                "a table's rows are keyed by their record keys: produce the table keyed by that field, and leave join.right_key out",
            ));
        }
        self.right = table.topic.clone();
        Ok(())
    }

    /// The checks only a table join has (its topics were resolved).
    pub(super) fn validate_table(&self) -> Result<(), Refusal> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        if !self.window.is_zero() || !self.grace.is_zero() {
            let field = if self.window.is_zero() {
                "join.grace"
            } else {
                "join.window"
            };
            return Err((
                field,
                "is set with join.table".to_owned(),
                "leave it out: a stream record joins the table's row as of its timestamp, with no window (join.table.history says how far back it may look)",
            ));
        }
        if self.kind == Kind::Outer {
            return Err((
                "join.kind",
                "is \"outer\" with join.table".to_owned(),
                "use \"inner\" (records with a row) or \"left\" (every record, with its row or without): a table's rows do not expire",
            ));
        }
        if self.repartition == RepartitionPolicy::Always {
            return Err((
                "join.repartition",
                "is \"always\" with join.table".to_owned(),
                "use \"auto\": the stream is re-keyed when its key is a field or its partition count differs; the table is read as it is",
            ));
        }
        if self.partitions.is_some() && !self.table_is_global() {
            return Err((
                "join.partitions",
                "is set with join.table".to_owned(),
                "leave it out: a table join has the table's partition count (the stream is re-keyed to it when it differs)",
            ));
        }
        if table.history.is_zero() && table.mode == TableModeSetting::Versioned {
            return Err((
                "join.table.history",
                "is zero".to_owned(),
                "give how far back a stream record may look up the table, e.g. \"1h\", or set join.table.mode = \"latest\"",
            ));
        }
        Ok(())
    }
}
