use proptest::prelude::*;

use super::*;

fn ev(side: Side, key: &str, ts: i64, offset: i64) -> Event {
    Event {
        topic: ["orders", "payments"][side.index()].into(),
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
            other => panic!("a two-topic join gave {other:?}"),
        })
        .collect()
}

const L: Side = Side::LEFT;
const R: Side = Side::RIGHT;

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
fn timestamps_at_the_ends_of_i64_are_as_far_apart_as_they_look() {
    // i64::MIN − i64::MAX wrapped to 1 (and the others to 6 and 10), and −1 − i64::MAX is
    // i64::MIN, whose abs() wrapped to itself: all were within the window of 10 and matched.
    let far = [
        (i64::MIN, i64::MAX),
        (i64::MIN + 5, i64::MAX),
        (i64::MIN, i64::MAX - 9),
        (-1, i64::MAX),
    ];
    for (a, b) in far {
        assert_eq!(
            run(JoinKind::Left, &[(L, "k", a), (R, "k", b)]),
            ["expire Left 0"],
            "{a} and {b}"
        );
    }
    // The other way round, the older one is late: stream time minus the retention saturates.
    assert_eq!(
        run(JoinKind::Left, &[(R, "k", i64::MAX), (L, "k", i64::MIN)]),
        ["late Left 1"]
    );
    // Near the ends and across zero, the window still decides.
    for (a, b, matched) in [
        (i64::MIN, i64::MIN + 10, true),
        (i64::MIN, i64::MIN + 11, false),
        (i64::MAX - 10, i64::MAX, true),
        (i64::MAX - 11, i64::MAX, false),
        (-5, 5, true),
        (-6, 5, false),
        (5, -5, true),
    ] {
        let out = run(JoinKind::Inner, &[(L, "k", a), (R, "k", b)]);
        assert_eq!(out == ["match k@0+1"], matched, "{a} and {b}: {out:?}");
    }
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
                    other => panic!("a two-topic join gave {other:?}"),
            };
            for e in events {
                prop_assert_eq!(e, &input_event(e.offset as usize));
            }
            match o {
                JoinOutcome::Match { left, right } => matches.push((left.offset as usize, right.offset as usize)),
                JoinOutcome::Expired { event, .. } => expired.push(event.offset as usize),
                JoinOutcome::Late { event, .. } => late.push(event.offset as usize),
                    other => panic!("a two-topic join gave {other:?}"),
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

/// One insert of the spill property test: side, key, how far the clock moves (negative: an
/// event that much older than the newest, out of order or late), value and headers.
type Step = (bool, u8, i64, Option<usize>, bool);

fn step() -> impl Strategy<Value = Step> {
    let moves = prop_oneof![8 => 0i64..8, 1 => -20i64..0, 1 => -80i64..-20];
    let value = prop_oneof![
        1 => Just(None),
        1 => Just(Some(0usize)),
        4 => prop_oneof![Just(100usize), Just(1_000), Just(3_000)].prop_map(Some),
    ];
    (
        any::<bool>(),
        0u8..6,
        moves,
        value,
        prop::bool::weighted(0.2),
    )
}

fn spill_event(i: usize, &(left, key, _, value, headers): &Step, ts: i64) -> (Side, Event) {
    let side = if left { L } else { R };
    let mut e = ev(side, &format!("key-{key}"), ts, i as i64);
    e.value = value.map(|len| vec![i as u8; len].into());
    if headers {
        e.headers = vec![crate::event::Header {
            key: format!("h{i}"),
            value: i.is_multiple_of(2).then(|| vec![7; i % 5]),
        }]
        .into();
    }
    (side, e)
}

/// Per side, the smallest needed offset, from every held event one by one (as needed_offsets
/// did before it kept a summary per store segment).
fn smallest_needed_by_scan(state: &JoinState) -> [Option<i64>; 2] {
    let mut min = [None::<i64>; 2];
    for h in state.store.live() {
        let head = state.store.head(h);
        let i = (head.side == R) as usize;
        min[i] = Some(min[i].map_or(head.offset, |m| m.min(head.offset)));
        if head.partner_offset != UNMATCHED && state.kind.reports_expiry(head.side) {
            let j = 1 - i;
            min[j] = Some(min[j].map_or(head.partner_offset, |m| m.min(head.partner_offset)));
        }
    }
    min
}

/// Per side, the smallest needed offset.
fn smallest_needed(state: &JoinState) -> [Option<i64>; 2] {
    [L, R].map(|side| {
        state
            .needed_offsets()
            .filter(|(s, _)| *s == side)
            .map(|(_, o)| o)
            .min()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Spilling changes where events are, never what the join does.
    #[test]
    fn a_state_that_spills_acts_as_one_that_does_not(
        kind in prop_oneof![Just(JoinKind::Inner), Just(JoinKind::Left), Just(JoinKind::Outer)],
        window_ms in 0i64..60,
        grace_ms in 0i64..20,
        budget in 0usize..8_192,
        steps in prop::collection::vec(step(), 0..150),
    ) {
        let window = JoinWindow { window_ms, grace_ms };
        let base = tempfile::tempdir().unwrap();
        let mut in_ram = JoinState::new(window, kind);
        let mut spilling = JoinState::new(window, kind);
        spilling.spill_to(SpillDir::create(base.path()).unwrap());
        spilling.set_ram_budget(budget);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let mut clock = 1_000;
        for (i, s) in steps.iter().enumerate() {
            clock += s.2.max(0);
            let (side, e) = spill_event(i, s, clock + s.2.min(0));
            in_ram.insert(side, e.clone(), &mut want);
            spilling.insert(side, e, &mut got);
            prop_assert_eq!(&got, &want, "after event {}", i);
            prop_assert_eq!(spilling.held(), in_ram.held());
            // In RAM, the per-segment summaries are exact.
            prop_assert_eq!(smallest_needed(&in_ram), smallest_needed_by_scan(&in_ram));
            // A spilled segment gives lower bounds of what its events need: never above.
            let offsets_of = |side| steps.iter().enumerate()
                .filter(move |(_, s)| s.0 == (side == L)).map(|(j, _)| j as i64);
            for (side, o) in spilling.needed_offsets() {
                prop_assert!(offsets_of(side).any(|j| j == o), "{side:?} {o} is no offset of that side");
            }
            for (got, want) in smallest_needed(&spilling).into_iter().zip(smallest_needed(&in_ram)) {
                prop_assert!(got.is_some() || want.is_none());
                prop_assert!(got.unwrap_or(i64::MIN) <= want.unwrap_or(i64::MAX), "{got:?} > {want:?}");
            }
        }
        let stats = spilling.store_stats();
        prop_assert!(stats.read_back_bytes_total <= stats.spilled_bytes_total);
        if spilling.held().0 == 0 {
            prop_assert_eq!(stats.disk_bytes, 0);
        }
    }
}

/// `n` pairs: a left event per key, its right partner `window` later, 1 KB values.
fn pairs(n: i64, window: i64) -> Vec<(Side, Event)> {
    let mut events: Vec<(Side, Event)> = (0..n)
        .flat_map(|i| {
            let left = (L, ev(L, &format!("k{i}"), 1_000 + i, 2 * i));
            let right = (R, ev(R, &format!("k{i}"), 1_000 + i + window, 2 * i + 1));
            [left, right]
        })
        .map(|(side, mut e)| {
            e.value = Some(vec![e.offset as u8; 1_000].into());
            (side, e)
        })
        .collect();
    events.sort_by_key(|(_, e)| e.timestamp);
    events
}

fn run_pairs(state: &mut JoinState, events: &[(Side, Event)]) -> Vec<JoinOutcome> {
    let mut out = Vec::new();
    for (side, e) in events {
        state.insert(*side, e.clone(), &mut out);
    }
    // Far in the future: everything expires.
    state.insert(L, ev(L, "end", 1 << 40, 1 << 40), &mut out);
    out
}

#[test]
fn store_stats_count_what_was_spilled_and_read_back() {
    let base = tempfile::tempdir().unwrap();
    let window = JoinWindow {
        window_ms: 500,
        grace_ms: 0,
    };
    let events = pairs(2_000, 400);
    let want = run_pairs(&mut JoinState::new(window, JoinKind::Outer), &events);
    let mut state = JoinState::new(window, JoinKind::Outer);
    state.spill_to(SpillDir::create(base.path()).unwrap());
    state.set_ram_budget(256 << 10);
    let mut got = Vec::new();
    let mut peak = 0;
    for (side, e) in &events {
        state.insert(*side, e.clone(), &mut got);
        peak = peak.max(state.store_stats().ram_bytes);
    }
    let stats = state.store_stats();
    assert!(stats.spilled_bytes_total > 1 << 20, "{stats:?}");
    assert!(stats.read_back_bytes_total > 0, "{stats:?}");
    assert!(stats.disk_bytes > 0, "{stats:?}");
    // The budget, the segment being filled, and the segments read back to expire.
    assert!(peak <= (256 << 10) + 3 * (256 << 10), "peak {peak}");
    state.insert(L, ev(L, "end", 1 << 40, 1 << 40), &mut got);
    assert_eq!(got, want);
    assert_eq!(
        want.len(),
        2_000,
        "every pair matches; the last event does not expire"
    );
    let stats = state.store_stats();
    assert_eq!(stats.disk_bytes, 0, "{stats:?}");
    assert_eq!(
        stats.read_back_bytes_total, stats.spilled_bytes_total,
        "the expiry walk read every spilled segment back, once"
    );
}

#[test]
fn a_state_that_cannot_spill_keeps_everything_in_ram_and_joins_the_same() {
    let base = tempfile::tempdir().unwrap();
    let window = JoinWindow {
        window_ms: 500,
        grace_ms: 0,
    };
    let events = pairs(1_000, 400);
    let want = run_pairs(&mut JoinState::new(window, JoinKind::Left), &events);
    let dir = SpillDir::create(base.path()).unwrap();
    std::fs::remove_dir_all(dir.path()).unwrap();
    let mut state = JoinState::new(window, JoinKind::Left);
    state.spill_to(dir);
    state.set_ram_budget(0);
    let mut got = Vec::new();
    for (side, e) in &events[..1_000] {
        state.insert(*side, e.clone(), &mut got);
    }
    let stats = state.store_stats();
    assert_eq!((stats.spilled_bytes_total, stats.disk_bytes), (0, 0));
    assert!(stats.ram_bytes > 1_000 * 1_000, "{stats:?}");
    for (side, e) in &events[1_000..] {
        state.insert(*side, e.clone(), &mut got);
    }
    state.insert(L, ev(L, "end", 1 << 40, 1 << 40), &mut got);
    assert_eq!(got, want);
}
