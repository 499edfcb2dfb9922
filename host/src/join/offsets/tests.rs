use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::event::Event;
use crate::join::order::TaskQueue;
use crate::join::state::{JoinKind, JoinState, JoinWindow};

#[test]
fn the_commit_offset_is_the_smallest_needed_offset() {
    assert_eq!(CommitPoint::new(10, [7, 9], Some(9)).offset, 7);
    assert_eq!(CommitPoint::new(10, [], Some(9)).offset, 10);
    // Nothing at or after the commit offset was processed: no replay bound.
    assert_eq!(CommitPoint::new(10, [], Some(9)).processed_through, None);
}

#[test]
fn metadata_round_trips_and_anything_else_means_none() {
    let point = CommitPoint::new(10, [3], Some(9));
    assert_eq!(CommitPoint::parse_metadata(&point.metadata()), Some(9));
    assert_eq!(CommitPoint::parse_metadata(""), None);
    assert_eq!(CommitPoint::parse_metadata("someone else's"), None);
    assert_eq!(
        CommitPoint::parse_metadata("cojoin/1 processed-through=x"),
        None
    );
}

const W: JoinWindow = JoinWindow {
    window_ms: 10,
    grace_ms: 5,
};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Match(i64, i64),
    Expired(bool, i64),
    Late(bool, i64),
}

fn seen(o: &JoinOutcome) -> Seen {
    match o {
        JoinOutcome::Match { left, right } => Seen::Match(left.offset, right.offset),
        JoinOutcome::Expired { side, event } => Seen::Expired(*side == Side::LEFT, event.offset),
        JoinOutcome::Late { side, event } => Seen::Late(*side == Side::LEFT, event.offset),
        other => panic!("a two-topic join gave {other:?}"),
    }
}

fn events(side: Side, spec: &[(u8, i64)]) -> Vec<Event> {
    spec.iter()
        .enumerate()
        .map(|(i, &(key, ts))| Event {
            topic: format!("{side:?}").into(),
            partition: 0,
            offset: i as i64,
            timestamp: ts,
            key: Some(vec![key].into()),
            value: None,
            headers: Box::default(),
        })
        .collect()
}

/// One owner of the task: consumes both partitions from `start`, replaying up to `bounds`.
struct Owner {
    state: JoinState,
    queue: TaskQueue,
    bounds: ReplayBounds,
    processed: [Option<i64>; 2],
    emitted: Vec<(Seen, usize)>,
    steps: usize,
}

impl Owner {
    fn new(kind: JoinKind, input: [&[Event]; 2], start: [CommitPoint; 2]) -> Self {
        let mut queue = TaskQueue::new(0);
        for (i, side) in [Side::LEFT, Side::RIGHT].into_iter().enumerate() {
            queue.set_replay(side, start[i].offset, start[i].processed_through);
            for e in &input[i][start[i].offset as usize..] {
                queue.push(side, e.clone());
            }
        }
        Owner {
            state: JoinState::new(W, kind),
            queue,
            bounds: ReplayBounds::new(start.map(|p| p.processed_through)),
            processed: [None, None],
            emitted: Vec::new(),
            steps: 0,
        }
    }

    fn step(&mut self) -> bool {
        let Some((side, event)) = self.queue.next(0) else {
            return false;
        };
        let offset = event.offset;
        let mut out = Vec::new();
        self.state.insert(side, event, &mut out);
        for o in &out {
            if !self.bounds.suppresses(side, offset, o) {
                self.emitted.push((seen(o), self.steps));
            }
        }
        self.processed[(side == Side::RIGHT) as usize] = Some(offset);
        self.steps += 1;
        true
    }

    fn commit(&self, input: [&[Event]; 2]) -> [CommitPoint; 2] {
        [Side::LEFT, Side::RIGHT].map(|side| {
            let i = (side == Side::RIGHT) as usize;
            let next = self
                .queue
                .first_offset(side)
                .unwrap_or(input[i].len() as i64);
            let held = self
                .state
                .needed_offsets()
                .filter(|(s, _)| *s == side)
                .map(|(_, o)| o)
                .collect::<Vec<_>>();
            CommitPoint::new(next, held, self.processed[i])
        })
    }
}

fn check_recovery(
    kind: JoinKind,
    left: Vec<(u8, i64)>,
    right: Vec<(u8, i64)>,
    commit_at: usize,
    extra: usize,
    exact: bool,
) -> Result<(), TestCaseError> {
    let (l, r) = (events(Side::LEFT, &left), events(Side::RIGHT, &right));
    let input = [&l[..], &r[..]];
    let from_start = [CommitPoint::new(0, [], None); 2];

    let mut reference = Owner::new(kind, input, from_start);
    while reference.step() {}
    let want: BTreeSet<Seen> = reference.emitted.iter().map(|(s, _)| s.clone()).collect();

    let mut first = Owner::new(kind, input, from_start);
    while first.steps < commit_at && first.step() {}
    let committed = first.commit(input);
    // Work after the commit, then kill -9: its outcomes were acted on but not committed.
    while first.steps < commit_at + extra && first.step() {}

    let mut second = Owner::new(kind, input, committed);
    while second.step() {}

    let mut got: BTreeMap<Seen, usize> = BTreeMap::new();
    for (s, _) in first.emitted.iter().chain(second.emitted.iter()) {
        *got.entry(s.clone()).or_default() += 1;
    }
    let got_set: BTreeSet<Seen> = got.keys().cloned().collect();
    let lost: Vec<_> = want.difference(&got_set).collect();
    prop_assert!(lost.is_empty(), "lost {lost:?}; commit {committed:?}");
    if exact {
        let spurious: Vec<_> = got_set.difference(&want).collect();
        prop_assert!(
            spurious.is_empty(),
            "spurious {spurious:?}; commit {committed:?}"
        );
    }
    // Duplicates only for outcomes the first owner emitted after its commit.
    let after_commit: BTreeSet<&Seen> = first
        .emitted
        .iter()
        .filter(|(_, step)| *step >= commit_at)
        .map(|(s, _)| s)
        .collect();
    for (s, n) in &got {
        if *n > 1 {
            prop_assert!(
                after_commit.contains(s),
                "{s:?} repeated but was emitted before the commit"
            );
            prop_assert_eq!(*n, 2);
        }
    }
    Ok(())
}

fn kinds() -> impl Strategy<Value = JoinKind> {
    prop_oneof![
        Just(JoinKind::Inner),
        Just(JoinKind::Left),
        Just(JoinKind::Outer)
    ]
}

fn side_in_order() -> impl Strategy<Value = Vec<(u8, i64)>> {
    prop::collection::vec((0u8..4, 0i64..200), 0..40).prop_map(|mut v| {
        let mut ts: Vec<i64> = v.iter().map(|x| x.1).collect();
        ts.sort();
        for (x, t) in v.iter_mut().zip(ts) {
            x.1 = t;
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Timestamps in order within each partition (the common case): a crash at any point loses
    /// nothing, invents nothing, and repeats only what ran after the last commit.
    #[test]
    fn a_crash_anywhere_loses_nothing_with_in_order_partitions(
        kind in kinds(),
        left in side_in_order(),
        right in side_in_order(),
        commit_at in 0usize..80,
        extra in 0usize..20,
    ) {
        check_recovery(kind, left, right, commit_at, extra, true)?;
    }

    /// Out-of-order timestamps within partitions: still nothing lost.
    #[test]
    fn a_crash_anywhere_loses_nothing_with_out_of_order_partitions(
        kind in kinds(),
        left in prop::collection::vec((0u8..4, 0i64..200), 0..40),
        right in prop::collection::vec((0u8..4, 0i64..200), 0..40),
        commit_at in 0usize..80,
        extra in 0usize..20,
    ) {
        check_recovery(kind, left, right, commit_at, extra, false)?;
    }
}
