//! Counts a task keeps of what it did, summed over tasks for metrics (metrics.rs) and read by tests;
//! plain numbers, apart from the task so that the metrics side needs nothing else of it.

/// Counts per task, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskCounters {
    pub records: u64,
    pub matches: u64,
    pub expiries: u64,
    pub late: u64,
    /// Records stamped too far ahead of the wall clock (`join.max_future`).
    pub future_timestamps: u64,
    pub null_keys: u64,
    pub tombstones: u64,
    pub failed_calls: u64,
    pub dead_lettered: u64,
    /// Plugin records not produced: a topic they may not go to, or refused by the producer or
    /// broker (their inputs dead-lettered as `output-refused`).
    pub refused_outputs: u64,
    /// Outcomes not acted on again because a previous owner had (replay).
    pub suppressed: u64,
    /// Join state bytes moved to disk and read back (from the state's store).
    pub spilled_bytes: u64,
    pub read_back_bytes: u64,
    /// Table joins: table records applied, and stream records that found no row.
    pub table_updates: u64,
    pub table_misses: u64,
    /// Table joins, versioned: stream records and updates stamped before stream time − history.
    pub table_too_old: u64,
    /// Table joins: records read by restores (from the table's beginning to its end offset when
    /// the task started), and the milliseconds they took.
    pub table_restored_records: u64,
    pub table_restore_ms: u64,
}

impl TaskCounters {
    /// Adds `other`'s counts to these (to sum over tasks).
    pub fn add(&mut self, other: &TaskCounters) {
        self.records += other.records;
        self.matches += other.matches;
        self.expiries += other.expiries;
        self.late += other.late;
        self.future_timestamps += other.future_timestamps;
        self.null_keys += other.null_keys;
        self.tombstones += other.tombstones;
        self.failed_calls += other.failed_calls;
        self.dead_lettered += other.dead_lettered;
        self.refused_outputs += other.refused_outputs;
        self.suppressed += other.suppressed;
        self.spilled_bytes += other.spilled_bytes;
        self.read_back_bytes += other.read_back_bytes;
        self.table_updates += other.table_updates;
        self.table_misses += other.table_misses;
        self.table_too_old += other.table_too_old;
        self.table_restored_records += other.table_restored_records;
        self.table_restore_ms += other.table_restore_ms;
    }
}
