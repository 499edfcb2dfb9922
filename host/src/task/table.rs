//! A table join's task (issue 33): its right side is a table, not a stream. Table records are
//! upserts into [`TableState`] and call nothing; each stream record is looked up there and, with
//! a row, handed to `on-match(key, record, row)`; without one, counted (`inner`) or handed to
//! `on-expire` at once (`left`: there is no window to wait for). The task takes its records in
//! timestamp order across both partitions, so a stream record is looked up once every update
//! stamped at or before it was applied (the broker's records, not the wall clock, say when).
//!
//! The restore: the I/O layer starts the table's partition at its beginning (the topic is the
//! table's changelog) and tells the task its end offset then; the task says in the log and the
//! counters when it got there: records, rows, bytes and seconds.

use std::sync::Arc;
use std::time::Instant;

use super::{PartitionTask, TableJoin};
use crate::event::{Event, Side};
use crate::join::table::{SharedTable, TableLookup, TableMode, TableState, TableUpdate};
use crate::join::{JoinKind, JoinOutcome};

/// The table's side of the join: always the right one (`b` in `on-match`).
pub const TABLE_SIDE: Side = Side::RIGHT;

pub(super) struct TableSide {
    /// Co-partitioned: the task's own table (its partition's rows).
    pub(super) state: TableState,
    /// Global: the host's view of the whole table, in which the task looks its stream up (its
    /// own `state` then stays empty, its restore done).
    shared: Option<Arc<SharedTable>>,
    restore: Restore,
    /// The consumer's position on the table's partition, as last told: past transaction markers
    /// and records compacted away, which no poll delivers.
    position: i64,
}

/// How far the restore got: until the table's partition is read to the end offset it had when
/// the task started.
struct Restore {
    started: Instant,
    /// The end offset to read to; `None` until the I/O layer said.
    end: Option<i64>,
    /// Past the end offset: what it took has been counted and said.
    done: bool,
    records: u64,
}

impl TableSide {
    pub(super) fn new(table: TableJoin) -> Self {
        let (mode, shared) = match table {
            TableJoin::CoPartitioned(mode) => (mode, None),
            TableJoin::Global(shared) => (TableMode::Latest, Some(shared)),
        };
        TableSide {
            state: TableState::new(mode),
            restore: Restore {
                started: Instant::now(),
                end: None,
                done: shared.is_some(),
                records: 0,
            },
            shared,
            position: 0,
        }
    }

    /// Joins one record of the task: a table record is applied, a stream record looked up.
    pub(super) fn join(
        &mut self,
        side: Side,
        event: Event,
        kind: JoinKind,
        counters: &mut super::TaskCounters,
        out: &mut Vec<JoinOutcome>,
    ) {
        if side == TABLE_SIDE {
            if !self.restore.done {
                self.restore.records += 1;
            }
            match self.state.upsert(&event) {
                TableUpdate::Applied => counters.table_updates += 1,
                TableUpdate::TooOld => counters.table_too_old += 1,
            }
            return;
        }
        let lookup = match &self.shared {
            Some(shared) => shared.lookup(&event),
            None => self.state.lookup(&event),
        };
        match lookup {
            TableLookup::Found(row) => out.push(JoinOutcome::Match {
                left: Arc::new(event),
                right: Arc::new(row),
            }),
            lookup => {
                if lookup == TableLookup::TooOld {
                    counters.table_too_old += 1;
                } else {
                    counters.table_misses += 1;
                }
                if kind == JoinKind::Left {
                    out.push(JoinOutcome::Expired {
                        side: Side::LEFT,
                        event: Arc::new(event),
                    });
                }
            }
        }
    }
}

impl PartitionTask {
    /// The end offset of the table's partition when the task started: what the restore reads to.
    pub(super) fn set_restore_end(&mut self, end: i64) {
        if let Some(table) = &mut self.table {
            table.restore.end = Some(end);
        }
    }

    /// The consumer's position on the table's partition.
    pub(super) fn set_table_position(&mut self, position: i64) {
        if let Some(table) = &mut self.table {
            table.position = table.position.max(position);
        }
    }

    /// Whether `outcome`, caused by the record at `offset` of `side`, was acted on by a previous
    /// owner. In a table join only stream records cause outcomes, and a replayed one was acted
    /// on whichever row it finds now.
    pub(super) fn suppresses(&self, side: Side, offset: i64, outcome: &JoinOutcome) -> bool {
        match self.table {
            Some(_) => self.bounds.is_replay(side, offset),
            None => self.bounds.suppresses(side, offset, outcome),
        }
    }

    /// Whether the restore got to its end: every table record before the end offset the task
    /// started with was applied. Said once, in the log and the counters.
    pub(super) fn check_restore(&mut self) {
        // A global table's task has no table partition (its restore is done from the start).
        let Some(reached) = self.next_offset.get(TABLE_SIDE.index()).copied() else {
            return;
        };
        let Some(table) = &mut self.table else {
            return;
        };
        let reached = reached.max(table.position);
        let restore = &mut table.restore;
        let Some(end) = restore.end.filter(|_| !restore.done) else {
            return;
        };
        let queued_before_end = self.queue.first_offset(TABLE_SIDE).is_some_and(|o| o < end);
        if reached < end || queued_before_end {
            return;
        }
        restore.done = true;
        let took = restore.started.elapsed();
        self.counters.table_restored_records += restore.records;
        self.counters.table_restore_ms += took.as_millis() as u64;
        let topic = self.policy.outputs.inputs.get(TABLE_SIDE.index());
        tracing::info!(
            target: "cojoin::report",
            "task {}: table {}-{} restored: {} records read, {} rows, {} bytes, in {:.2} s",
            self.partition,
            topic.map_or("?", String::as_str),
            self.partition,
            restore.records,
            table.state.rows(),
            table.state.bytes(),
            took.as_secs_f64()
        );
    }

    /// Whether the task's table (if it has one) is restored.
    pub fn table_restored(&self) -> bool {
        self.table.as_ref().is_none_or(|t| t.restore.done)
    }
}
