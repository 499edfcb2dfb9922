//! The N-way join on the packed store against the reference model ([`crate::join::multi`]),
//! outcome for outcome, in RAM and spilling; its limits and its memory; replay in `replay`.

mod replay;

use proptest::prelude::*;

use super::*;
use crate::join::multi::{MultiJoinState, MultiKind, MultiOutcome};
use crate::join::SpillDir;

const TOPICS: [&str; 4] = ["orders", "payments", "shipments", "returns"];

/// One insert: topic, key, how far the clock moves (negative: an event that much older than
/// the newest, out of order or late), value length (`None`: a tombstone), whether it has a header.
type Step = (usize, u8, i64, Option<usize>, bool);

fn step(topics: usize) -> impl Strategy<Value = Step> {
    let moves = prop_oneof![8 => 0i64..8, 1 => -20i64..0, 1 => -80i64..-20];
    let value = prop_oneof![
        1 => Just(None),
        1 => Just(Some(0usize)),
        4 => prop_oneof![Just(20usize), Just(1_000), Just(3_000)].prop_map(Some),
    ];
    (0..topics, 0u8..3, moves, value, prop::bool::weighted(0.2))
}

/// The events of `steps`, numbered by input position (so an outcome names its inputs). With
/// `self_join`, every topic is one topic, "events", partition 0: the sides tell them apart.
fn events(steps: &[Step], self_join: bool) -> Vec<(usize, Event)> {
    let mut clock = 1_000;
    steps
        .iter()
        .enumerate()
        .map(|(i, &(topic, key, moves, value, headers))| {
            clock += moves.max(0);
            let e = Event {
                topic: if self_join { "events" } else { TOPICS[topic] }.into(),
                partition: if self_join { 0 } else { topic as i32 },
                offset: i as i64,
                timestamp: clock + moves.min(0),
                key: Some(vec![b'k', key].into()),
                value: value.map(|len| vec![i as u8; len].into()),
                headers: match headers {
                    true => vec![crate::event::Header {
                        key: format!("h{i}"),
                        value: Some(vec![7; i % 5]),
                    }]
                    .into(),
                    false => Box::default(),
                },
            };
            (topic, e)
        })
        .collect()
}

/// The reference's outcome, as [`JoinState`] names it.
fn as_join_outcome(o: MultiOutcome) -> JoinOutcome {
    match o {
        MultiOutcome::Match { events } => JoinOutcome::MatchN { events },
        MultiOutcome::Expired { event, partners } => JoinOutcome::ExpiredN { event, partners },
        MultiOutcome::Late { topic, event } => JoinOutcome::Late {
            side: Side::of(topic),
            event,
        },
    }
}

fn multi_kind(kind: JoinKind) -> MultiKind {
    match kind {
        JoinKind::Inner => MultiKind::Inner,
        JoinKind::Left => MultiKind::Left,
        JoinKind::Outer => unreachable!("an N-way join is inner or left"),
    }
}

/// A state of `topics` topics; spilling past `budget` into a dir under `base` if given.
fn state(
    topics: usize,
    window: JoinWindow,
    kind: JoinKind,
    budget: Option<usize>,
    base: &std::path::Path,
) -> JoinState {
    let mut state = JoinState::with_topics(topics, window, kind);
    if let Some(budget) = budget {
        state.spill_to(SpillDir::create(base).unwrap());
        state.set_ram_budget(budget);
    }
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// After every insert, the packed state has caused exactly what the reference model has, in
    /// the same order, with the events whole.
    #[test]
    fn three_and_four_topics_equal_the_reference_model_outcome_for_outcome(
        (topics, steps) in (3usize..=4).prop_flat_map(|n| (Just(n), prop::collection::vec(step(n), 0..120))),
        kind in prop_oneof![Just(JoinKind::Inner), Just(JoinKind::Left)],
        window_ms in 0i64..30,
        grace_ms in 0i64..10,
        budget in prop_oneof![2 => Just(None), 1 => Just(Some(0usize)), 1 => (0usize..8_192).prop_map(Some)],
        self_join in prop::bool::weighted(0.2),
    ) {
        let window = JoinWindow { window_ms, grace_ms };
        let base = tempfile::tempdir().unwrap();
        let mut reference = MultiJoinState::new(topics, window, multi_kind(kind));
        let mut packed = state(topics, window, kind, budget, base.path());
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for (i, (topic, e)) in events(&steps, self_join).into_iter().enumerate() {
            reference.insert(topic, e.clone(), &mut want);
            packed.insert(Side::of(topic), e, &mut got);
            let want: Vec<JoinOutcome> = want.drain(..).map(as_join_outcome).collect();
            prop_assert_eq!(&got, &want, "after event {}", i);
            got.clear();
            prop_assert_eq!(packed.stream_time(), reference.stream_time());
        }
        // Far in the future: everything leaves, retired events too, and spill files go.
        let end = Event {
            offset: 1 << 40,
            timestamp: 1 << 40,
            key: Some(b"end".to_vec().into()),
            ..events(&[(0, 0, 0, None, false)], false)[0].1.clone()
        };
        reference.insert(0, end.clone(), &mut want);
        packed.insert(Side::LEFT, end, &mut got);
        let want: Vec<JoinOutcome> = want.drain(..).map(as_join_outcome).collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(packed.held().0, 1);
        prop_assert_eq!(packed.store_stats().disk_bytes, 0);
        let needed: Vec<(Side, i64)> = packed.needed_offsets().collect();
        prop_assert_eq!(needed, [(Side::LEFT, 1 << 40)]);
    }
}

#[test]
fn a_partner_whose_window_closes_first_is_kept_for_the_order_and_its_commit_point() {
    // payments@0 closes at 15 (window 10, grace 5), before orders@8 (closes at 23) that found
    // it: it is retired, still held (and needed by a restart) until the order has left, and
    // reported as its partner. The shipment@30 comes too late for the order.
    let w = JoinWindow {
        window_ms: 10,
        grace_ms: 5,
    };
    let mut state = JoinState::with_topics(3, w, JoinKind::Left);
    let mut out = Vec::new();
    let ev = |topic: usize, ts: i64, offset: i64| Event {
        topic: TOPICS[topic].into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(b"k".to_vec().into()),
        value: Some(vec![1; 10].into()),
        headers: Box::default(),
    };
    state.insert(Side::of(1), ev(1, 0, 100), &mut out);
    state.insert(Side::LEFT, ev(0, 8, 200), &mut out);
    state.insert(Side::of(2), ev(2, 20, 300), &mut out);
    assert!(out.is_empty(), "{out:?}");
    let mut needed: Vec<(Side, i64)> = state.needed_offsets().collect();
    needed.sort();
    assert_eq!(
        needed,
        [(Side::LEFT, 200), (Side::of(1), 100), (Side::of(2), 300)],
        "the payment's window closed at 15, stream time is 20: it is kept for the order"
    );
    state.insert(Side::of(2), ev(2, 30, 301), &mut out);
    let [JoinOutcome::ExpiredN { event, partners }] = &out[..] else {
        panic!("{out:?}");
    };
    assert_eq!(event.offset, 200);
    let partners: Vec<Vec<i64>> = (partners.iter())
        .map(|p| p.iter().map(|e| e.offset).collect())
        .collect();
    assert_eq!(partners, [vec![100], vec![]]);
}

#[test]
fn an_outer_join_of_three_topics_is_refused_by_name() {
    let message = std::panic::catch_unwind(|| {
        JoinState::with_topics(
            3,
            JoinWindow {
                window_ms: 1,
                grace_ms: 0,
            },
            JoinKind::Outer,
        );
    })
    .expect_err("outer takes two topics");
    let message = message.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("3 topics is inner or left, not outer"),
        "{message}"
    );
    for topics in [1, MAX_TOPICS + 1] {
        assert!(std::panic::catch_unwind(|| {
            JoinState::with_topics(
                topics,
                JoinWindow {
                    window_ms: 1,
                    grace_ms: 0,
                },
                JoinKind::Inner,
            );
        })
        .is_err());
    }
}

#[test]
fn eight_topics_of_one_partition_keep_their_sides() {
    // One (topic, partition) joined with itself as every side: the side's low bit is a flag,
    // the rest its origin's, so sides 0 and 1 share an origin and 2 and 3 another.
    let w = JoinWindow {
        window_ms: 100,
        grace_ms: 0,
    };
    let mut state = JoinState::with_topics(MAX_TOPICS, w, JoinKind::Inner);
    let mut out = Vec::new();
    let e = |t: usize| Event {
        topic: "events".into(),
        partition: 0,
        offset: t as i64,
        timestamp: 1_000 + t as i64,
        key: Some(b"k".to_vec().into()),
        value: Some(vec![t as u8; 10].into()),
        headers: Box::default(),
    };
    for t in (0..MAX_TOPICS).rev() {
        state.insert(Side::of(t), e(t), &mut out);
    }
    let sides: Vec<Side> = state.store.live().map(|h| state.store.side(h)).collect();
    assert_eq!(
        sides,
        (0..MAX_TOPICS).rev().map(Side::of).collect::<Vec<_>>()
    );
    let [JoinOutcome::MatchN { events }] = &out[..] else {
        panic!("{out:?}");
    };
    let offsets: Vec<i64> = events.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, (0..MAX_TOPICS as i64).collect::<Vec<_>>());
    assert!(out.iter().all(|o| matches!(o, JoinOutcome::MatchN { .. })));
}

/// `n` keys: per key a payment and a shipment, then its order `lag` ms later, 1 KB values, in
/// timestamp order. The payment and the shipment close before the order: a left join retires them.
fn orders_last(n: i64, lag: i64) -> Vec<(Side, Event)> {
    let mut events: Vec<(Side, Event)> = (0..n)
        .flat_map(|i| {
            [(1, 0), (2, 1), (0, lag)].map(|(t, at)| {
                let e = Event {
                    topic: TOPICS[t].into(),
                    partition: 0,
                    offset: 3 * i + t as i64,
                    timestamp: 1_000 + i + at,
                    key: Some(format!("k{i}").into_bytes().into()),
                    value: Some(vec![t as u8; 1_000].into()),
                    headers: Box::default(),
                };
                (Side::of(t), e)
            })
        })
        .collect();
    events.sort_by_key(|(_, e)| e.timestamp);
    events
}

#[test]
fn retired_events_move_on_so_a_spilling_left_join_stays_within_its_budget() {
    let window = JoinWindow {
        window_ms: 1_000,
        grace_ms: 0,
    };
    let events = orders_last(3_000, 900);
    let end = |out: &mut Vec<JoinOutcome>, state: &mut JoinState| {
        let mut e = events[0].1.clone();
        (e.timestamp, e.offset, e.key) = (1 << 40, 1 << 40, Some(b"end".to_vec().into()));
        state.insert(Side::LEFT, e, out);
    };
    let mut in_ram = JoinState::with_topics(3, window, JoinKind::Left);
    let mut want = Vec::new();
    for (side, e) in &events {
        in_ram.insert(*side, e.clone(), &mut want);
    }
    end(&mut want, &mut in_ram);
    assert_eq!(
        want.len(),
        3_000,
        "every key matches once: {:?}",
        &want[..1]
    );

    let base = tempfile::tempdir().unwrap();
    let budget = 256 << 10;
    let mut state = state(3, window, JoinKind::Left, Some(budget), base.path());
    let mut got = Vec::new();
    let mut peak = 0;
    let mut retired = 0;
    for (side, e) in &events {
        state.insert(*side, e.clone(), &mut got);
        peak = peak.max(state.store_stats().ram_bytes);
        retired = retired.max(state.out_of_order.len());
    }
    assert!(
        retired > 1_000,
        "payments and shipments wait for their orders: {retired}"
    );
    // The budget, the segment being filled, and the segments read back to expire, as the
    // binary join (state/tests.rs): retired events do not keep the segments read back.
    assert!(peak <= budget + 3 * (256 << 10), "peak {peak}");
    end(&mut got, &mut state);
    assert_eq!(got, want);
    assert_eq!(state.store_stats().disk_bytes, 0);
}
