use super::*;

const IDLE: Duration = Duration::from_millis(500);

fn at(topic: &str, partition: i32) -> Source {
    (topic.to_owned(), partition)
}

fn held(timestamp: i64, offset: i64) -> Held<&'static str> {
    Held {
        timestamp,
        offset,
        record: "r",
    }
}

/// A merge holding `records` (partition, timestamp, offset) of topic "orders", fetched at `t0`,
/// every partition known to be caught up with the broker.
fn holding(t0: Instant, records: &[(i32, i64, i64)]) -> Merge<&'static str> {
    let mut merge = Merge::new(IDLE);
    for &(p, ts, offset) in records {
        merge.push(at("orders", p), held(ts, offset), t0);
    }
    merge.note_watermarks(|_| Some((0, 0)));
    merge.begin_round();
    merge
}

/// The record the merge lets go next at `now`, as the step takes it.
fn next<R>(merge: &mut Merge<R>, now: Instant) -> Option<(Source, Held<R>)> {
    let at = merge.choose(now)?;
    let held = merge.take(&at).expect("chosen for its head");
    Some((at, held))
}

/// Everything the merge lets go at `now`: (partition, timestamp, offset).
fn drain(merge: &mut Merge<&'static str>, now: Instant) -> Vec<(i32, i64, i64)> {
    std::iter::from_fn(|| next(merge, now))
        .map(|((_, p), h)| (p, h.timestamp, h.offset))
        .collect()
}

#[test]
fn records_of_several_partitions_go_in_timestamp_order() {
    let t0 = Instant::now();
    let mut merge = holding(
        t0,
        &[(0, 10, 0), (0, 30, 1), (0, 50, 2), (1, 20, 0), (1, 40, 1)],
    );
    assert_eq!(merge.held(), 5);
    // Partition 1 runs dry after 40: fetched from IDLE ago, it holds 50 back no longer.
    assert_eq!(
        drain(&mut merge, t0 + IDLE),
        [(0, 10, 0), (1, 20, 0), (0, 30, 1), (1, 40, 1), (0, 50, 2)]
    );
    assert_eq!(merge.held(), 0);
}

#[test]
fn the_merge_waits_for_an_empty_partition_then_goes_on_without_it() {
    let t0 = Instant::now();
    let mut merge = holding(t0, &[(0, 10, 0), (0, 20, 1)]);
    merge.start(at("orders", 1), None, t0);
    merge.note_watermarks(|_| Some((0, 0)));
    assert_eq!(
        next(&mut merge, t0),
        None,
        "partition 1 may yet bring an earlier record"
    );
    assert_eq!(next(&mut merge, t0 + IDLE / 2), None);
    assert_eq!(drain(&mut merge, t0 + IDLE), [(0, 10, 0), (0, 20, 1)]);
}

#[test]
fn a_partition_behind_the_broker_is_waited_for_longer_than_an_idle_one() {
    let t0 = Instant::now();
    let mut merge = holding(t0, &[(0, 10, 0)]);
    merge.start(at("orders", 1), Some(5), t0);
    // Partition 1 has records up to 9 on the broker, not fetched yet.
    merge.note_watermarks(|(_, p)| Some((0, if *p == 1 { 10 } else { 1 })));
    assert_eq!(next(&mut merge, t0 + IDLE), None);
    assert_eq!(next(&mut merge, t0 + BEHIND_WAIT - IDLE), None);
    assert_eq!(drain(&mut merge, t0 + BEHIND_WAIT), [(0, 10, 0)]);
}

#[test]
fn watermarks_say_whether_a_partition_has_records_not_fetched() {
    assert!(behind(Some(5), Some((0, 10))));
    assert!(!behind(Some(10), Some((0, 10))));
    assert!(
        behind(None, Some((3, 10))),
        "nothing committed, records there"
    );
    assert!(
        !behind(None, Some((10, 10))),
        "nothing committed, nothing there"
    );
    assert!(
        !behind(None, Some((-1, -1))),
        "an empty partition's watermarks"
    );
    assert!(behind(Some(10), None), "not known: waited for");
}

#[test]
fn ties_go_to_the_first_partition_and_a_partition_keeps_its_fetch_order() {
    let t0 = Instant::now();
    let mut merge = Merge::new(IDLE);
    merge.push(at("payments", 0), held(10, 0), t0);
    merge.push(at("orders", 2), held(10, 0), t0);
    merge.push(at("orders", 1), held(10, 7), t0);
    // Out of timestamp order within a partition: it still goes as fetched.
    merge.push(at("orders", 1), held(5, 8), t0);
    merge.note_watermarks(|_| Some((0, 0)));
    let order: Vec<(Source, i64)> = std::iter::from_fn(|| next(&mut merge, t0 + IDLE))
        .map(|(at, h)| (at, h.offset))
        .collect();
    assert_eq!(
        order,
        [
            (at("orders", 1), 7),
            (at("orders", 1), 8),
            (at("orders", 2), 0),
            (at("payments", 0), 0)
        ]
    );
}

#[test]
fn an_empty_merge_lets_nothing_go() {
    let t0 = Instant::now();
    let mut merge: Merge<&str> = Merge::new(IDLE);
    assert_eq!(next(&mut merge, t0), None);
    merge.start(at("orders", 0), Some(3), t0);
    merge.note_watermarks(|_| Some((0, 3)));
    assert_eq!(next(&mut merge, t0 + BEHIND_WAIT), None);
    assert_eq!(merge.held(), 0);
}

#[test]
fn over_the_cap_the_earliest_goes_without_waiting_down_to_half_the_cap() {
    let t0 = Instant::now();
    let mut merge = holding(t0, &[(0, 10, 0), (0, 20, 1), (0, 30, 2), (0, 40, 3)]);
    merge.cap = 4;
    merge.start(at("orders", 1), None, t0);
    merge.note_watermarks(|_| Some((0, 0)));
    assert!(merge.is_full());
    merge.begin_round();
    // Partition 1 would hold the merge back for IDLE; forced, records go until fewer than half
    // the cap are held.
    assert_eq!(drain(&mut merge, t0), [(0, 10, 0), (0, 20, 1), (0, 30, 2)]);
    assert_eq!(merge.held(), 1);
    merge.begin_round();
    assert_eq!(
        next(&mut merge, t0),
        None,
        "under the cap, the merge waits again"
    );
}

#[test]
fn a_rewind_drops_what_the_batch_read_of_the_partitions_it_wrote_and_keeps_the_rest() {
    let t0 = Instant::now();
    let mut merge = holding(t0, &[(0, 10, 0), (0, 30, 1), (1, 20, 4), (2, 40, 9)]);
    let mut written = Written::default();
    let (first_at, first) = next(&mut merge, t0 + IDLE).unwrap();
    written.note(first_at, first.offset);
    let (second_at, second) = next(&mut merge, t0 + IDLE).unwrap();
    written.note(second_at, second.offset);
    assert_eq!(merge.held(), 2);
    let mut commits: Vec<(Source, i64)> = written.commits().map(|(a, n)| (a.clone(), n)).collect();
    commits.sort();
    assert_eq!(commits, [(at("orders", 0), 1), (at("orders", 1), 5)]);

    let mut seeks = merge.rewind(&written);
    seeks.sort();
    assert_eq!(seeks, [(at("orders", 0), 0), (at("orders", 1), 4)]);
    // Partition 0's record at 30 is fetched again from offset 0; partition 2 was not written.
    assert_eq!(merge.held(), 1);
    assert_eq!(drain(&mut merge, t0 + IDLE), [(2, 40, 9)]);
}

#[test]
fn a_batch_notes_the_first_offset_it_took_and_the_one_after_its_last() {
    let mut written = Written::default();
    assert!(written.is_empty());
    for offset in [7, 8, 9] {
        written.note(at("orders", 0), offset);
    }
    assert_eq!(
        written.commits().collect::<Vec<_>>(),
        [(&at("orders", 0), 10)]
    );
    let mut merge: Merge<&str> = Merge::new(IDLE);
    assert_eq!(merge.rewind(&written), [(at("orders", 0), 7)]);
}

#[test]
fn revoked_partitions_and_those_no_longer_assigned_lose_their_held_records() {
    let t0 = Instant::now();
    let mut merge = holding(t0, &[(0, 10, 0), (1, 20, 0), (1, 25, 1), (2, 30, 0)]);
    merge.forget(&[at("orders", 1)]);
    assert_eq!(merge.held(), 2);
    let assigned: HashSet<Source> = [at("orders", 0), at("orders", 3)].into();
    assert_eq!(merge.follow(&assigned), [at("orders", 3)]);
    assert_eq!(merge.held(), 1);
    merge.start(at("orders", 3), Some(0), t0);
    assert!(merge.follow(&assigned).is_empty());
    merge.note_watermarks(|_| Some((0, 0)));
    assert_eq!(next(&mut merge, t0), None, "waits for the new partition");
    assert_eq!(drain(&mut merge, t0 + IDLE), [(0, 10, 0)]);
}
