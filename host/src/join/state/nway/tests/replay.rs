//! A restart from the commit points `needed_offsets` allows rebuilds a state that goes on as
//! the one it replaces: the claim that an N-way join needs its held events' own offsets only.

use super::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A stream in offset order, cut at a random point: a fresh state fed, of the records before
    /// the cut, those at or past their partition's commit offset (the smallest needed offset of
    /// its side, or its next offset), causes with the rest of the stream exactly what the state
    /// that saw everything causes: matches, expiries with their partners, late events.
    #[test]
    fn a_restart_from_the_needed_offsets_goes_on_as_the_state_it_replaces(
        steps in prop::collection::vec(step(3), 0..120),
        kind in prop_oneof![Just(JoinKind::Inner), Just(JoinKind::Left)],
        window_ms in 0i64..30,
        grace_ms in 0i64..10,
        cut in any::<prop::sample::Index>(),
        budget in prop_oneof![3 => Just(None), 1 => Just(Some(0usize))],
    ) {
        let window = JoinWindow { window_ms, grace_ms };
        let base = tempfile::tempdir().unwrap();
        // Far in the future, last: every expiry is reported.
        let mut end = events(&[(0, 0, 0, None, false)], false).remove(0).1;
        (end.timestamp, end.offset, end.key) = (1 << 40, 1 << 40, Some(b"end".to_vec().into()));
        let mut events = events(&steps, false);
        // Offsets count per topic, as a partition's do.
        let mut next = [0i64; 3];
        for (topic, e) in &mut events {
            e.offset = next[*topic];
            next[*topic] += 1;
        }
        events.push((0, end));
        let k = cut.index(events.len());

        let mut original = state(3, window, kind, budget, &base.path().join("original"));
        let mut ignored = Vec::new();
        let mut next = [0i64; 3];
        for (topic, e) in &events[..k] {
            original.insert(Side::of(*topic), e.clone(), &mut ignored);
            next[*topic] = e.offset + 1;
        }
        let mut commit = next;
        for (side, offset) in original.needed_offsets() {
            commit[side.index()] = commit[side.index()].min(offset);
        }
        let mut fresh = state(3, window, kind, budget, &base.path().join("fresh"));
        for (topic, e) in &events[..k] {
            if e.offset >= commit[*topic] {
                fresh.insert(Side::of(*topic), e.clone(), &mut ignored);
            }
        }
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for (i, (topic, e)) in events[k..].iter().enumerate() {
            original.insert(Side::of(*topic), e.clone(), &mut want);
            fresh.insert(Side::of(*topic), e.clone(), &mut got);
            prop_assert_eq!(&got, &want, "cut at {} (commit {:?}), event {} after it", k, commit, i);
        }
    }
}
