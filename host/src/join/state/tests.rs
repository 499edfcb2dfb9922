use proptest::prelude::*;

use super::*;

fn ev(side: Side, key: &str, ts: i64, offset: i64) -> Event {
    Event {
        topic: match side {
            Side::Left => "orders".into(),
            Side::Right => "payments".into(),
        },
        partition: 0,
        offset,
        timestamp: ts,
        key: Some(key.as_bytes().to_vec().into()),
        value: Some(vec![0; 100].into()),
        headers: Box::default(),
    }
}

const W: JoinWindow = JoinWindow {
    window_ms: 10,
    grace_ms: 5,
};

fn run(kind: JoinKind, input: &[(Side, &str, i64)]) -> Vec<String> {
    let mut state = JoinState::new(W, kind);
    let mut out = Vec::new();
    for (i, (side, key, ts)) in input.iter().enumerate() {
        state.insert(*side, ev(*side, key, *ts, i as i64), &mut out);
    }
    out.iter()
        .map(|o| match o {
            JoinOutcome::Match { left, right } => format!(
                "match {}@{}+{}",
                String::from_utf8_lossy(left.key_bytes()),
                left.offset,
                right.offset
            ),
            JoinOutcome::Expired { side, event } => format!("expire {side:?} {}", event.offset),
            JoinOutcome::Late { side, event } => format!("late {side:?} {}", event.offset),
        })
        .collect()
}

use Side::{Left as L, Right as R};

#[test]
fn pairs_within_the_window_match_once_in_either_arrival_order() {
    assert_eq!(
        run(JoinKind::Inner, &[(L, "k", 100), (R, "k", 110)]),
        ["match k@0+1"]
    );
    assert_eq!(
        run(JoinKind::Inner, &[(R, "k", 100), (L, "k", 95)]),
        ["match k@1+0"]
    );
    assert!(run(JoinKind::Inner, &[(L, "k", 100), (R, "k", 111)]).is_empty());
    assert!(run(JoinKind::Inner, &[(L, "k", 100), (R, "j", 100)]).is_empty());
}

#[test]
fn every_partner_in_the_window_matches() {
    let out = run(
        JoinKind::Inner,
        &[(L, "k", 100), (L, "k", 104), (R, "k", 105)],
    );
    assert_eq!(out, ["match k@0+2", "match k@1+2"]);
}

#[test]
fn left_join_reports_an_unmatched_left_event_only_after_its_window_and_grace() {
    // close time of the first event: 100 + 10 + 5 = 115; stream time must pass it.
    assert!(run(JoinKind::Left, &[(L, "k", 100), (R, "x", 115)]).is_empty());
    assert_eq!(
        run(JoinKind::Left, &[(L, "k", 100), (R, "x", 116)]),
        ["expire Left 0"]
    );
    // A matched event is never reported as expired; an unmatched right one is not, in a left join.
    assert_eq!(
        run(
            JoinKind::Left,
            &[(L, "k", 100), (R, "k", 101), (R, "x", 200)]
        ),
        ["match k@0+1"]
    );
}

#[test]
fn outer_join_reports_unmatched_events_of_both_sides() {
    let out = run(
        JoinKind::Outer,
        &[(L, "a", 100), (R, "b", 101), (L, "z", 200)],
    );
    assert_eq!(out, ["expire Left 0", "expire Right 1"]);
}

#[test]
fn late_events_are_reported_and_join_nothing() {
    // stream time 200; 200 - 15 = 185: an event at 184 is late, one at 185 is not.
    let out = run(
        JoinKind::Inner,
        &[(L, "k", 200), (R, "k", 184), (R, "k", 185)],
    );
    assert_eq!(out, ["late Right 1"]);
    let out = run(
        JoinKind::Inner,
        &[(L, "k", 190), (L, "x", 200), (R, "k", 185)],
    );
    assert_eq!(out, ["match k@0+2"]);
}

#[test]
fn held_events_and_bytes_return_to_zero_once_everything_expired() {
    let mut state = JoinState::new(W, JoinKind::Inner);
    let mut out = Vec::new();
    state.insert(L, ev(L, "k", 100, 0), &mut out);
    state.insert(R, ev(R, "k", 101, 1), &mut out);
    let (events, bytes) = state.held();
    assert_eq!(events, 2);
    assert!(bytes > 200, "{bytes}");
    state.insert(L, ev(L, "z", 1000, 2), &mut out);
    assert_eq!(state.held().0, 1);
    assert_eq!(state.needed_offsets().collect::<Vec<_>>(), [(L, 2)]);
}

/// A deliberately naive model of the semantics in the module doc, O(n²).
fn reference(
    kind: JoinKind,
    input: &[(bool, u8, i64)],
) -> (Vec<(usize, usize)>, Vec<usize>, Vec<usize>) {
    let ret = W.window_ms + W.grace_ms;
    let mut st: Option<i64> = None;
    let mut accepted: Vec<usize> = Vec::new();
    let mut matches = Vec::new();
    let mut late = Vec::new();
    let mut st_before = Vec::new();
    for (j, &(left, key, ts)) in input.iter().enumerate() {
        st_before.push(st);
        if st.is_some_and(|s| ts < s - ret) {
            late.push(j);
            continue;
        }
        // j matches every accepted i of the other side, same key, within the window, still held.
        for &i in &accepted {
            let (l_i, k_i, t_i) = input[i];
            let held = st.is_none_or(|s| s <= t_i + ret);
            if l_i != left && k_i == key && (t_i - ts).abs() <= W.window_ms && held {
                matches.push(if left { (j, i) } else { (i, j) });
            }
        }
        st = Some(st.map_or(ts, |s| s.max(ts)));
        accepted.push(j);
    }
    let final_st = st;
    let mut expired = Vec::new();
    for &i in &accepted {
        let (left, _, t_i) = input[i];
        let reported = match kind {
            JoinKind::Inner => false,
            JoinKind::Left => left,
            JoinKind::Outer => true,
        };
        let matched = matches.iter().any(|&(a, b)| a == i || b == i);
        if reported && !matched && final_st.is_some_and(|s| s > t_i + ret) {
            expired.push(i);
        }
    }
    (matches, expired, late)
}

proptest! {
    #[test]
    fn matches_expiries_and_late_events_equal_the_reference_model(
        kind in prop_oneof![Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Outer)],
        input in prop::collection::vec((any::<bool>(), 0u8..4, 0i64..120), 0..60),
        value_bytes in prop_oneof![Just(100usize), Just(3_000)],
    ) {
        // 3 KB values spread the events over many store segments, freed as they empty.
        let ev = |side, key: &str, ts, offset| {
            let mut e = ev(side, key, ts, offset);
            e.value = Some(vec![offset as u8; value_bytes].into());
            e
        };
        let mut state = JoinState::new(W, kind);
        let mut out = Vec::new();
        for (i, &(left, key, ts)) in input.iter().enumerate() {
            let side = if left { L } else { R };
            state.insert(side, ev(side, &key.to_string(), ts, i as i64), &mut out);
        }
        let mut matches = Vec::new();
        let mut expired = Vec::new();
        let mut late = Vec::new();
        // Every event handed out is the event that went in, whole.
        let input_event = |i: usize| {
            let (left, key, ts) = input[i];
            let side = if left { L } else { R };
            ev(side, &key.to_string(), ts, i as i64)
        };
        for o in &out {
            let events: Vec<&Event> = match o {
                JoinOutcome::Match { left, right } => vec![left, right],
                JoinOutcome::Expired { event, .. } | JoinOutcome::Late { event, .. } => vec![event],
            };
            for e in events {
                prop_assert_eq!(e, &input_event(e.offset as usize));
            }
            match o {
                JoinOutcome::Match { left, right } => matches.push((left.offset as usize, right.offset as usize)),
                JoinOutcome::Expired { event, .. } => expired.push(event.offset as usize),
                JoinOutcome::Late { event, .. } => late.push(event.offset as usize),
            }
        }
        let (mut want_m, mut want_e, want_l) = reference(kind, &input);
        let mut got_m = matches.clone();
        got_m.sort();
        want_m.sort();
        prop_assert_eq!(got_m, want_m);
        let mut got_e = expired.clone();
        got_e.sort();
        want_e.sort();
        prop_assert_eq!(got_e, want_e);
        prop_assert_eq!(late, want_l);
        // Everything accepted is either still held or gone because its window closed.
        let st = state.stream_time();
        let matched: std::collections::HashSet<usize> = matches.iter().flat_map(|&(a, b)| [a, b]).collect();
        for (side, offset) in state.needed_offsets() {
            let (_, _, ts) = input[offset as usize];
            let held = st.unwrap() <= ts + W.window_ms + W.grace_ms;
            // Either held itself, or the partner of a held, matched event.
            prop_assert!(held || matched.contains(&(offset as usize)), "{side:?} {offset} should be gone");
        }
    }
}
