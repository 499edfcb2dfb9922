//! The table against its reference model (model.rs) on random interleavings of updates and
//! lookups, both modes, in RAM and spilling; then one example per rule, eviction and compaction.

use proptest::prelude::*;

use super::model::TableModel;
use super::*;

/// One step: a table update (`true`) or a stream record's lookup; its key; how far the clock
/// moves (negative: a record that much older than the newest, out of order or too old); value
/// length (`None`: a tombstone); whether it has a header.
type Step = (bool, u8, i64, Option<usize>, bool);

fn step() -> impl Strategy<Value = Step> {
    // Moves of 0 give equal timestamps: updates that replace a version.
    let moves = prop_oneof![8 => 0i64..6, 1 => -20i64..0, 1 => -80i64..-20];
    let value = prop_oneof![
        1 => Just(None),
        1 => Just(Some(0usize)),
        4 => prop_oneof![Just(20usize), Just(1_000), Just(3_000)].prop_map(Some),
    ];
    (
        prop::bool::ANY,
        0u8..4,
        moves,
        value,
        prop::bool::weighted(0.2),
    )
}

/// The records of `steps`, numbered by position: updates of "prices" partition 2, stream
/// records of "orders" partition 2.
fn records(steps: &[Step]) -> Vec<(bool, Event)> {
    let mut clock = 1_000;
    let records = steps.iter().enumerate();
    records
        .map(|(i, &(update, key, moves, value, header))| {
            clock += moves.max(0);
            let e = Event {
                topic: if update { "prices" } else { "orders" }.into(),
                partition: 2,
                offset: i as i64,
                timestamp: clock + moves.min(0),
                key: Some(vec![b'k', key].into()),
                value: value.map(|len| vec![i as u8; len].into()),
                headers: match header {
                    true => vec![crate::event::Header {
                        key: format!("h{i}"),
                        value: Some(vec![7; i % 5]),
                    }]
                    .into(),
                    false => Box::default(),
                },
            };
            (update, e)
        })
        .collect()
}

fn record(offset: i64, ts: i64, key: &str, value: Option<&str>) -> Event {
    Event {
        topic: "prices".into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(key.as_bytes().into()),
        value: value.map(|v| v.as_bytes().into()),
        headers: Box::default(),
    }
}

/// What a stream record of `key` at `ts` finds: the value of its row, `None` for no row, or
/// "too old".
fn row_at(table: &mut TableState, key: &str, ts: i64) -> Result<Option<String>, &'static str> {
    match table.lookup(&record(0, ts, key, None)) {
        TableLookup::Found(e) => Ok(Some(String::from_utf8(e.value.unwrap().into()).unwrap())),
        TableLookup::NoRow => Ok(None),
        TableLookup::TooOld => Err("too old"),
    }
}

fn versioned(history_retention_ms: i64) -> TableMode {
    TableMode::Versioned {
        history_retention_ms,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// After every record, the table has answered what the model answers and agrees on stream
    /// time and rows; then every key at every time near the end, and once stream time is far
    /// ahead, the table holds its rows and nothing else.
    #[test]
    fn the_table_answers_as_the_reference_model(
        steps in prop::collection::vec(step(), 0..150),
        mode in prop_oneof![3 => (0i64..50).prop_map(versioned), 1 => Just(TableMode::Latest)],
        budget in prop_oneof![2 => Just(None), 1 => Just(Some(0usize)), 1 => (0usize..8_192).prop_map(Some)],
        compact_slack in prop_oneof![Just(0), Just(COMPACT_SLACK)],
    ) {
        let base = tempfile::tempdir().unwrap();
        let mut table = TableState::new(mode);
        table.compact_slack = compact_slack;
        if let Some(budget) = budget {
            table.spill_to(SpillDir::create(base.path()).unwrap());
            table.set_ram_budget(budget);
        }
        let mut model = TableModel::new(mode);
        for (i, (update, e)) in records(&steps).into_iter().enumerate() {
            if update {
                prop_assert_eq!(table.upsert(&e), model.upsert(&e), "update {}", i);
            } else {
                prop_assert_eq!(table.lookup(&e), model.lookup(&e), "lookup {}", i);
            }
            prop_assert_eq!(table.stream_time(), model.stream_time());
            prop_assert_eq!(table.rows(), model.rows(), "after record {}", i);
        }
        if let Some(st) = model.stream_time() {
            for key in 0..4u8 {
                for ts in st - 60..=st {
                    let e = Event {
                        key: Some(vec![b'k', key].into()),
                        timestamp: ts,
                        ..record(0, 0, "", None)
                    };
                    prop_assert_eq!(table.lookup(&e), model.lookup(&e), "key {} at {}", key, ts);
                }
            }
        }
        let end = record(0, 1 << 40, "end", None);
        prop_assert_eq!(table.lookup(&end), TableLookup::NoRow);
        prop_assert_eq!(table.versions(), model.rows(), "history and tombstones have left");
    }
}

#[test]
fn a_stream_record_joins_the_row_as_of_its_timestamp() {
    let mut table = TableState::new(versioned(1_000));
    table.upsert(&record(0, 10, "k", Some("a")));
    table.upsert(&record(1, 20, "k", Some("b")));
    table.upsert(&record(2, 30, "k", None));
    table.upsert(&record(3, 40, "k", Some("c")));
    let found: Vec<_> = [5, 10, 19, 20, 29, 30, 39, 40, 45]
        .into_iter()
        .map(|ts| row_at(&mut table, "k", ts).unwrap())
        .collect();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        found,
        [
            None,
            s("a"),
            s("a"),
            s("b"),
            s("b"),
            None,
            None,
            s("c"),
            s("c")
        ],
        "the update at 30 deleted the row until 40"
    );
    assert_eq!(row_at(&mut table, "other", 45), Ok(None));
    assert_eq!((table.rows(), table.versions()), (1, 4));
    let TableLookup::Found(row) = table.lookup(&record(9, 25, "k", None)) else {
        panic!("a row at 25");
    };
    assert_eq!(
        (row.offset, row.timestamp),
        (1, 20),
        "the row is the table record"
    );
}

#[test]
fn out_of_order_updates_go_into_history_within_retention_and_are_dropped_beyond() {
    let mut table = TableState::new(versioned(10));
    assert_eq!(
        table.upsert(&record(0, 100, "k", Some("new"))),
        TableUpdate::Applied
    );
    assert_eq!(
        table.upsert(&record(1, 95, "k", Some("older"))),
        TableUpdate::Applied
    );
    assert_eq!(row_at(&mut table, "k", 97), Ok(Some("older".into())));
    assert_eq!(row_at(&mut table, "k", 100), Ok(Some("new".into())));
    // Stream time 100, retention 10: 90 is the oldest time the table answers for.
    assert_eq!(
        table.upsert(&record(2, 89, "k", Some("lost"))),
        TableUpdate::TooOld
    );
    assert_eq!(
        table.upsert(&record(3, 90, "k", Some("oldest"))),
        TableUpdate::Applied
    );
    assert_eq!(row_at(&mut table, "k", 92), Ok(Some("oldest".into())));
    // The same timestamp again: the later offset replaces the version.
    table.upsert(&record(4, 100, "k", Some("newer")));
    assert_eq!(row_at(&mut table, "k", 100), Ok(Some("newer".into())));
    assert_eq!((table.rows(), table.versions()), (1, 3));
}

#[test]
fn a_lookup_before_stream_time_minus_retention_is_too_old() {
    let mut table = TableState::new(versioned(10));
    table.upsert(&record(0, 100, "k", Some("v")));
    assert_eq!(row_at(&mut table, "k", 89), Err("too old"));
    assert_eq!(
        row_at(&mut table, "k", 90),
        Ok(None),
        "no version at 90 yet"
    );
    assert_eq!(row_at(&mut table, "k", 200), Ok(Some("v".into())));
    assert_eq!(
        row_at(&mut table, "k", 190),
        Ok(Some("v".into())),
        "the row has not ended: it reaches back as far as retention"
    );
    assert_eq!(row_at(&mut table, "k", 189), Err("too old"));
}

#[test]
fn latest_mode_joins_the_last_update_by_arrival() {
    let mut table = TableState::new(TableMode::Latest);
    table.upsert(&record(0, 100, "k", Some("a")));
    assert_eq!(
        table.upsert(&record(1, 50, "k", Some("b"))),
        TableUpdate::Applied,
        "nothing is too old"
    );
    assert_eq!(row_at(&mut table, "k", 10), Ok(Some("b".into())));
    assert_eq!(row_at(&mut table, "k", 1_000), Ok(Some("b".into())));
    assert_eq!(row_at(&mut table, "k", 0), Ok(Some("b".into())));
    assert_eq!((table.rows(), table.versions()), (1, 1));
    table.upsert(&record(2, 1, "k", None));
    assert_eq!(row_at(&mut table, "k", 2_000), Ok(None));
    assert_eq!((table.rows(), table.versions()), (0, 0));
}

#[test]
fn history_leaves_once_no_allowed_lookup_can_reach_it() {
    let mut table = TableState::new(versioned(10));
    table.upsert(&record(0, 0, "k", Some("a")));
    table.upsert(&record(1, 5, "k", Some("b")));
    table.upsert(&record(2, 10, "k", Some("c")));
    table.upsert(&record(3, 5, "j", None));
    assert_eq!(table.versions(), 4);
    // Horizon 4: "a" ended at 5 and a lookup at 4 still finds it.
    assert_eq!(row_at(&mut table, "x", 14), Ok(None));
    assert_eq!(table.versions(), 4);
    assert_eq!(row_at(&mut table, "k", 4), Ok(Some("a".into())));
    // Horizon 5: "a" goes, and so does "j", deleted at 5.
    assert_eq!(row_at(&mut table, "x", 15), Ok(None));
    assert_eq!(table.versions(), 2);
    assert_eq!(row_at(&mut table, "x", 20), Ok(None));
    assert_eq!((table.rows(), table.versions()), (1, 1));
    assert_eq!(row_at(&mut table, "k", 10), Ok(Some("c".into())));
    let bytes = table.bytes();
    assert!(bytes > 0 && bytes < 1_000, "{bytes}");
}

/// 10 keys updated 100,000 times, and 1,000 rows never updated, one every 100 updates: each
/// segment holds a row for good, and without compaction they would hold every segment (about
/// 25 MB of versions for 250 kB of rows).
fn hot_and_cold(mut table: TableState) -> TableState {
    let value = |v: usize| format!("{v:0>200}");
    for i in 0..101_000i64 {
        let key = match i % 101 {
            0 => format!("cold{}", i / 101),
            n => format!("hot{}", n % 10),
        };
        table.upsert(&record(i, i, &key, Some(&value(i as usize))));
        // Removed versions' bytes, in RAM or on disk: never far above the live ones'.
        let (garbage, live) = (table.store.garbage_bytes(), table.store.live_bytes());
        assert!(
            garbage < 2 * live + 2 * COMPACT_SLACK,
            "after update {i}: {garbage} bytes of removed versions for {live} live"
        );
    }
    for k in 0..1_000 {
        let row = row_at(&mut table, &format!("cold{k}"), 200_000);
        assert_eq!(row, Ok(Some(value(k * 101))));
    }
    let row = row_at(&mut table, "hot3", 200_000);
    assert_eq!(
        row,
        Ok(Some(value(100_992))),
        "updated last at 100,992 (% 101 = 93)"
    );
    assert_eq!((table.rows(), table.versions()), (1_010, 1_010));
    table
}

#[test]
fn compaction_frees_the_segments_rows_never_updated_would_hold() {
    for mode in [TableMode::Latest, versioned(0)] {
        let table = hot_and_cold(TableState::new(mode));
        let stats = table.store_stats();
        assert!(
            stats.ram_bytes < 2 * COMPACT_SLACK + 1_010 * 300,
            "{mode:?}: {stats:?}"
        );
    }
}

#[test]
fn a_table_spilling_everything_answers_alike_with_two_segments_in_ram() {
    let base = tempfile::tempdir().unwrap();
    let mut table = TableState::new(versioned(0));
    table.spill_to(SpillDir::create(base.path()).unwrap());
    table.set_ram_budget(0);
    let table = hot_and_cold(table);
    let stats = table.store_stats();
    assert!(stats.spilled_bytes_total > 20_000_000, "{stats:?}");
    assert!(
        stats.ram_bytes <= 2 * 256 * 1024,
        "the segment being filled and one the compaction read back: {stats:?}"
    );
}
