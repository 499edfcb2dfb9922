use proptest::prelude::*;

use super::*;
use crate::event::Side;
use crate::join::{JoinKind, JoinOutcome, JoinState};

const W: JoinWindow = JoinWindow {
    window_ms: 10,
    grace_ms: 5,
};

const TOPICS: [&str; 4] = ["orders", "payments", "shipments", "returns"];

/// Event `offset` of topic `topic`: offsets number the input, so an outcome names its inputs.
fn ev(topic: usize, key: u8, ts: i64, offset: i64) -> Event {
    Event {
        topic: TOPICS[topic].into(),
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(vec![b'k', key].into()),
        value: Some(vec![offset as u8; 20].into()),
        headers: Box::default(),
    }
}

fn run(topics: usize, kind: MultiKind, input: &[(usize, u8, i64)]) -> Vec<MultiOutcome> {
    let mut state = MultiJoinState::new(topics, W, kind);
    let mut out = Vec::new();
    for (i, &(topic, key, ts)) in input.iter().enumerate() {
        state.insert(topic, ev(topic, key, ts, i as i64), &mut out);
    }
    out
}

fn offsets(events: &[Arc<Event>]) -> Vec<usize> {
    events.iter().map(|e| e.offset as usize).collect()
}

#[test]
fn three_topics_match_once_all_three_are_within_the_window() {
    // key 1: orders@0, payments@5, shipments@9: max − min = 9 ≤ 10.
    // key 2: orders@0, payments@5, shipments@12: 12 > 10, no match.
    let input = [
        (0, 1, 0),
        (1, 1, 5),
        (0, 2, 0),
        (1, 2, 5),
        (2, 1, 9),
        (2, 2, 12),
    ];
    let out = run(3, MultiKind::Inner, &input);
    let matches: Vec<Vec<usize>> = out
        .iter()
        .filter_map(|o| match o {
            MultiOutcome::Match { events } => Some(offsets(events)),
            _ => None,
        })
        .collect();
    assert_eq!(matches, [vec![0, 1, 4]]);
}

#[test]
fn several_events_per_topic_give_every_combination_in_arrival_order() {
    let input = [(0, 1, 0), (0, 1, 1), (1, 1, 2), (1, 1, 3), (2, 1, 4)];
    let out = run(3, MultiKind::Inner, &input);
    let matches: Vec<Vec<usize>> = out
        .iter()
        .map(|o| match o {
            MultiOutcome::Match { events } => offsets(events),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        matches,
        [vec![0, 2, 4], vec![0, 3, 4], vec![1, 2, 4], vec![1, 3, 4]]
    );
}

#[test]
fn a_first_topic_event_in_no_match_expires_with_the_partners_it_found() {
    // orders@0 finds payments@4, never a shipment within 10; stream time 16 closes it
    // (0 + 10 + 5 < 16). payments@30 is outside its window.
    let input = [(0, 1, 0), (1, 1, 4), (2, 1, 14), (1, 1, 30)];
    let out = run(3, MultiKind::Left, &input);
    let expired: Vec<(usize, Vec<Vec<usize>>)> = out
        .iter()
        .filter_map(|o| match o {
            MultiOutcome::Expired { event, partners } => Some((
                event.offset as usize,
                partners.iter().map(|p| offsets(p)).collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(expired, [(0, vec![vec![1], vec![]])]);
    assert!(
        run(3, MultiKind::Inner, &input)
            .iter()
            .all(|o| !matches!(o, MultiOutcome::Expired { .. })),
        "inner reports no expiry"
    );
}

#[test]
fn late_events_join_nothing_and_everything_leaves_once_its_window_closes() {
    let mut state = MultiJoinState::new(3, W, MultiKind::Inner);
    let mut out = Vec::new();
    state.insert(0, ev(0, 1, 100, 0), &mut out);
    state.insert(1, ev(1, 1, 84, 1), &mut out);
    assert!(matches!(&out[..], [MultiOutcome::Late { topic: 1, .. }]));
    assert_eq!(state.held().0, 1);
    assert_eq!(state.needed_offsets(), [Some(0), None, None]);
    state.insert(2, ev(2, 1, 200, 2), &mut out);
    assert_eq!(state.held().0, 1, "orders@100 left at stream time 200");
    assert_eq!(state.needed_offsets(), [None, None, Some(2)]);
}

/// A deliberately naive model of the module doc's semantics: every combination of accepted
/// events checked. Returns (matches as input indices in topic order, expiries with their
/// partners, late events).
#[allow(clippy::type_complexity)]
fn reference(
    topics: usize,
    kind: MultiKind,
    input: &[(usize, u8, i64)],
) -> (Vec<Vec<usize>>, Vec<(usize, Vec<Vec<usize>>)>, Vec<usize>) {
    let ret = W.window_ms + W.grace_ms;
    let mut st: Option<i64> = None;
    let mut st_before: Vec<Option<i64>> = Vec::new();
    let mut accepted: Vec<usize> = Vec::new();
    let mut matches: Vec<Vec<usize>> = Vec::new();
    let mut late = Vec::new();
    // Held at j's arrival: not yet gone at the stream time before it.
    let held_at = |i: usize, st: Option<i64>| st.is_none_or(|s| s <= input[i].2 + ret);
    for (j, &(topic, key, ts)) in input.iter().enumerate() {
        st_before.push(st);
        if st.is_some_and(|s| ts < s - ret) {
            late.push(j);
            continue;
        }
        // Every tuple of accepted, held events of the other topics with j.
        let pools: Vec<Vec<usize>> = (0..topics)
            .map(|t| {
                if t == topic {
                    return vec![j];
                }
                accepted
                    .iter()
                    .copied()
                    .filter(|&i| input[i].0 == t && input[i].1 == key && held_at(i, st))
                    .collect()
            })
            .collect();
        let mut tuples: Vec<Vec<usize>> = vec![Vec::new()];
        for pool in &pools {
            tuples = tuples
                .into_iter()
                .flat_map(|t| {
                    pool.iter().map(move |&i| {
                        let mut t = t.clone();
                        t.push(i);
                        t
                    })
                })
                .collect();
        }
        for t in tuples {
            let times: Vec<i64> = t.iter().map(|&i| input[i].2).collect();
            if times.iter().max().unwrap() - times.iter().min().unwrap() <= W.window_ms {
                matches.push(t);
            }
        }
        st = Some(st.map_or(ts, |s| s.max(ts)));
        accepted.push(j);
    }
    let mut expired = Vec::new();
    if kind == MultiKind::Left {
        for &i in &accepted {
            let (topic, key, t_i) = input[i];
            let gone = st.is_some_and(|s| s > t_i + ret);
            if topic != 0 || !gone || matches.iter().any(|m| m.contains(&i)) {
                continue;
            }
            let partners = (1..topics)
                .map(|t| {
                    accepted
                        .iter()
                        .copied()
                        .filter(|&k| {
                            let (t_k, key_k, ts_k) = input[k];
                            let together = if k > i {
                                held_at(i, st_before[k])
                            } else {
                                held_at(k, st_before[i])
                            };
                            t_k == t
                                && key_k == key
                                && (ts_k - t_i).abs() <= W.window_ms
                                && together
                        })
                        .collect()
                })
                .collect();
            expired.push((i, partners));
        }
    }
    (matches, expired, late)
}

fn stream(topics: usize) -> impl Strategy<Value = Vec<(usize, u8, i64)>> {
    prop::collection::vec((0..topics, 0u8..3, 0i64..60), 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn three_and_four_topics_equal_the_reference_model(
        (topics, input) in (3usize..=4).prop_flat_map(|n| (Just(n), stream(n))),
        kind in prop_oneof![Just(MultiKind::Inner), Just(MultiKind::Left)],
    ) {
        let out = run(topics, kind, &input);
        let mut matches = Vec::new();
        let mut expired = Vec::new();
        let mut late = Vec::new();
        for o in &out {
            match o {
                MultiOutcome::Match { events } => {
                    let topics_in_order: Vec<&str> = events.iter().map(|e| &*e.topic).collect();
                    prop_assert_eq!(&topics_in_order[..], &TOPICS[..topics]);
                    matches.push(offsets(events));
                }
                MultiOutcome::Expired { event, partners } => expired.push((
                    event.offset as usize,
                    partners.iter().map(|p| offsets(p)).collect::<Vec<_>>(),
                )),
                MultiOutcome::Late { event, .. } => late.push(event.offset as usize),
            }
        }
        let (mut want_m, mut want_e, want_l) = reference(topics, kind, &input);
        matches.sort();
        want_m.sort();
        prop_assert_eq!(matches, want_m);
        expired.sort();
        want_e.sort();
        prop_assert_eq!(expired, want_e);
        prop_assert_eq!(late, want_l);
    }

    #[test]
    fn two_topics_are_the_binary_join_outcome_for_outcome(
        input in stream(2),
        left in any::<bool>(),
    ) {
        let (kind, binary_kind) = match left {
            true => (MultiKind::Left, JoinKind::Left),
            false => (MultiKind::Inner, JoinKind::Inner),
        };
        let multi: Vec<String> = run(2, kind, &input)
            .iter()
            .map(|o| match o {
                MultiOutcome::Match { events } => format!("match {:?}", offsets(events)),
                MultiOutcome::Expired { event, partners } => {
                    assert!(partners.iter().all(Vec::is_empty), "a partner in the window would have matched");
                    format!("expired {}", event.offset)
                }
                MultiOutcome::Late { topic, event } => format!("late {topic} {}", event.offset),
            })
            .collect();
        let mut binary = JoinState::new(W, binary_kind);
        let mut out = Vec::new();
        for (i, &(topic, key, ts)) in input.iter().enumerate() {
            let side = if topic == 0 { Side::LEFT } else { Side::RIGHT };
            binary.insert(side, ev(topic, key, ts, i as i64), &mut out);
        }
        let binary: Vec<String> = out
            .iter()
            .map(|o| match o {
                JoinOutcome::Match { left, right } => {
                    format!("match {:?}", [left.offset as usize, right.offset as usize])
                }
                JoinOutcome::Expired { event, .. } => format!("expired {}", event.offset),
                JoinOutcome::Late { side, event } => format!("late {} {}", side.index(), event.offset),
                other => panic!("a two-topic join gave {other:?}"),
            })
            .collect();
        prop_assert_eq!(multi, binary);
    }
}
