//! Table joins (issue 33): the right side's records are upserts, each left record is joined with
//! its key's row as of its timestamp; inner and left; deletions whatever `join.tombstones` says;
//! the restore's end; replayed stream records suppressed whatever row they find.

use super::*;
use crate::join::table::TableMode;

fn table_policy(kind: JoinKind, mode: TableMode) -> TaskPolicy {
    TaskPolicy {
        kind,
        table: Some(TableJoin::CoPartitioned(mode)),
        ..policy()
    }
}

const VERSIONED: TableMode = TableMode::Versioned {
    history_retention_ms: 1_000,
};

fn row(offset: i64, key: &str, ts: i64, value: Option<&str>) -> Event {
    Event {
        value: value.map(|v| v.as_bytes().to_vec().into()),
        ..ev(Side::RIGHT, offset, key, ts)
    }
}

/// Pushes `records` (in the given order), runs once, and returns the plugin's calls.
fn run(task: &mut PartitionTask, records: Vec<(Side, Event)>) -> Vec<String> {
    let mut plugin = FakePlugin::default();
    for (side, event) in records {
        task.push(side, event);
    }
    let batch = task.run(0, &mut plugin);
    task.acknowledge(batch);
    plugin.calls
}

#[test]
fn a_stream_record_joins_the_row_as_of_its_timestamp_and_updates_call_nothing() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Inner, VERSIONED), FRESH);
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 10, Some("gold"))),
            (Side::RIGHT, row(1, "c1", 20, Some("platinum"))),
            (Side::RIGHT, row(2, "c2", 30, Some("silver"))),
            // In timestamp order: 5 before any row of c1, 15 sees offset 0, 25 sees offset 1.
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 5)),
            (Side::LEFT, ev(Side::LEFT, 1, "c1", 15)),
            (Side::LEFT, ev(Side::LEFT, 2, "c1", 25)),
            (Side::LEFT, ev(Side::LEFT, 3, "c3", 35)),
        ],
    );
    assert_eq!(calls, ["match c1 1+0", "match c1 2+1"]);
    assert_eq!(task.counters.matches, 2);
    assert_eq!(task.counters.table_updates, 3);
    assert_eq!(task.counters.table_misses, 2);
    assert_eq!(task.counters.expiries, 0);
    assert_eq!(task.held().0, 2, "rows c1 and c2");
}

#[test]
fn a_left_table_join_hands_a_record_without_a_row_over_at_once() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Left, VERSIONED), FRESH);
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 10, Some("gold"))),
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 12)),
            (Side::LEFT, ev(Side::LEFT, 1, "c9", 13)),
        ],
    );
    assert_eq!(calls, ["match c1 0+0", "expire c9 1"]);
    assert_eq!(task.counters.expiries, 1);
    assert_eq!(task.counters.table_misses, 1);
}

#[test]
fn a_table_tombstone_deletes_the_row_whatever_join_tombstones_says() {
    // The test policy drops tombstones: a stream one is dropped, a table one still deletes.
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Left, VERSIONED), FRESH);
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 10, Some("gold"))),
            (Side::RIGHT, row(1, "c1", 20, None)),
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 15)),
            (Side::LEFT, ev(Side::LEFT, 1, "c1", 25)),
        ],
    );
    assert_eq!(calls, ["match c1 0+0", "expire c1 1"]);
    assert_eq!(task.counters.tombstones, 0);
    assert_eq!(task.held().0, 0);
}

#[test]
fn latest_mode_joins_the_newest_row_by_arrival() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Inner, TableMode::Latest), FRESH);
    // The update stamped 5 arrives after the one stamped 20: latest takes it, versioned would not.
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 20, Some("gold"))),
            (Side::RIGHT, row(1, "c1", 5, Some("bronze"))),
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 30)),
        ],
    );
    assert_eq!(calls, ["match c1 0+1"]);
}

#[test]
fn records_beyond_the_history_are_counted_too_old() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Left, VERSIONED), FRESH);
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 5_000, Some("gold"))),
            // Stream time 5000, history 1 s: a record at 3000 may not look back that far.
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 5_001)),
        ],
    );
    assert_eq!(calls, ["match c1 0+0"]);
    let calls = run(
        &mut task,
        vec![
            (Side::LEFT, ev(Side::LEFT, 1, "c1", 3_000)),
            (Side::RIGHT, row(1, "c1", 3_500, Some("old"))),
        ],
    );
    assert_eq!(
        calls,
        ["expire c1 1"],
        "handed over without a row, as Kafka Streams does"
    );
    assert_eq!(task.counters.table_too_old, 2, "the lookup and the update");
    assert_eq!(task.counters.table_misses, 0);
}

#[test]
fn the_restore_ends_at_the_table_end_offset_the_task_started_with() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Inner, VERSIONED), FRESH);
    task.set_end_offset_floors(&[0, 3]);
    run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 10, Some("a"))),
            (Side::RIGHT, row(1, "c2", 11, Some("b"))),
        ],
    );
    assert!(!task.table_restored(), "offset 2 not read yet");
    assert_eq!(task.counters.table_restored_records, 0);
    run(&mut task, vec![(Side::RIGHT, row(2, "c3", 12, Some("c")))]);
    assert!(task.table_restored());
    assert_eq!(task.counters.table_restored_records, 3);
    // Later updates are not the restore's.
    run(&mut task, vec![(Side::RIGHT, row(3, "c4", 13, Some("d")))]);
    assert_eq!(task.counters.table_restored_records, 3);
    assert_eq!(task.counters.table_updates, 4);
}

#[test]
fn a_restore_ends_at_the_consumers_position_past_records_compacted_away() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Inner, VERSIONED), FRESH);
    task.set_end_offset_floors(&[0, 10]);
    run(&mut task, vec![(Side::RIGHT, row(4, "c1", 10, Some("a")))]);
    assert!(!task.table_restored());
    // Offsets 5..9 were compacted away (or are transaction markers): the position says so.
    task.set_positions(&[None, Some(10)]);
    run(&mut task, vec![]);
    assert!(task.table_restored());
    assert_eq!(task.counters.table_restored_records, 1);
}

#[test]
fn replayed_stream_records_are_suppressed_whatever_row_they_find() {
    let start = [
        CommitPoint {
            offset: 0,
            processed_through: Some(0),
        },
        CommitPoint {
            offset: 0,
            processed_through: None,
        },
    ];
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Left, VERSIONED), &start);
    let calls = run(
        &mut task,
        vec![
            // A new row (not replay) as of the replayed record's time: acted on before anyway.
            (Side::RIGHT, row(0, "c1", 10, Some("gold"))),
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 12)),
            (Side::LEFT, ev(Side::LEFT, 1, "c1", 13)),
        ],
    );
    assert_eq!(calls, ["match c1 1+0"]);
    assert_eq!(task.counters.suppressed, 1);
}

#[test]
fn an_update_stamped_like_the_record_is_applied_before_it() {
    let mut task = PartitionTask::new(0, table_policy(JoinKind::Inner, VERSIONED), FRESH);
    // The stream's record pushed first, and the stream is the first side: the table's record
    // of the same millisecond still goes first ("the latest update stamped at or before").
    let calls = run(
        &mut task,
        vec![
            (Side::RIGHT, row(0, "c1", 10, Some("silver"))),
            (Side::LEFT, ev(Side::LEFT, 0, "c1", 20)),
            (Side::RIGHT, row(1, "c1", 20, Some("gold"))),
        ],
    );
    assert_eq!(calls, ["match c1 0+1"]);
}
