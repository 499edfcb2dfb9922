use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::event::Event;
use crate::join::multi::{MultiJoinState, MultiKind, MultiOutcome};
use crate::join::JoinWindow;
use crate::kafka::partitioner::murmur2;

const TOPICS: [&str; 3] = [ORDERS, PAYMENTS, SHIPMENTS];

/// What the join's reference model makes of `planned`, taken in arrival order by `partitions`
/// tasks (keys spread as the demo's murmur2 producer spreads them): per order key its results,
/// and the late records.
fn join(planned: &[Planned], partitions: i32) -> (HashMap<String, Vec<Intended>>, Vec<Planned>) {
    let window = JoinWindow {
        window_ms: WINDOW_MS,
        grace_ms: GRACE_MS,
    };
    let mut tasks: Vec<_> = (0..partitions)
        .map(|_| MultiJoinState::new(3, window, MultiKind::Left))
        .collect();
    let (mut results, mut late) = (HashMap::<String, Vec<Intended>>::new(), Vec::new());
    let mut out = Vec::new();
    for (offset, p) in planned.iter().enumerate() {
        let topic = TOPICS.iter().position(|t| *t == p.topic).unwrap();
        let task = (murmur2(p.key.as_bytes()) & 0x7fff_ffff) % partitions;
        let event = Event {
            topic: p.topic.into(),
            partition: task,
            offset: offset as i64,
            timestamp: p.timestamp,
            key: Some(p.key.as_bytes().into()),
            value: Some(p.value.as_bytes().into()),
            headers: Box::default(),
        };
        tasks[task as usize].insert(topic, event, &mut out);
        for outcome in out.drain(..) {
            let key = |e: &Arc<Event>| String::from_utf8(e.key_bytes().to_vec()).unwrap();
            match outcome {
                MultiOutcome::Match { events } => {
                    results.entry(key(&events[0])).or_default().push(Intended {
                        status: "shipped",
                        payments: 1,
                        shipments: 1,
                    });
                }
                // The example plugin's rule: unpaid when no payment came, else not shipped.
                MultiOutcome::Expired { event, partners } => {
                    let (payments, shipments) = (partners[0].len(), partners[1].len());
                    let status = if payments == 0 {
                        "unpaid"
                    } else {
                        "not-shipped"
                    };
                    results.entry(key(&event)).or_default().push(Intended {
                        status,
                        payments,
                        shipments,
                    });
                }
                MultiOutcome::Late { .. } => late.push(p.clone()),
            }
        }
    }
    (results, late)
}

#[test]
fn every_order_gets_the_one_result_its_fate_intends_and_only_delayed_shipments_are_late() {
    for (seed, partitions) in [(1, 3), (7, 3), (11, 1)] {
        let (planned, fates) = generate(3_000, seed);
        let (results, late) = join(&planned, partitions);
        let last_ts = planned.iter().map(|p| p.timestamp).max().unwrap();
        let mut open = 0;
        for (i, fate) in fates.iter().enumerate() {
            let key = order_key(i);
            match results.get(&key).map(Vec::as_slice) {
                Some([result]) => assert_eq!(*result, fate.intended(), "{key}: {fate:?}"),
                // The stream ended before its window did: only an expiry can still be due.
                None => {
                    let ts = i as i64 * ORDER_EVERY_MS;
                    assert!(ts > last_ts - 30_000, "{key} open, 30 s before the end");
                    assert_ne!(*fate, Fate::Shipped, "{key}");
                    open += 1;
                }
                Some(more) => panic!("{key} ({fate:?}) has {} results", more.len()),
            }
        }
        assert!(open < fates.len() / 20, "{open} of {} open", fates.len());
        let delayed = fates.iter().filter(|f| **f == Fate::Delayed).count();
        assert_eq!(late.len(), delayed, "seed {seed}");
        assert!(late.iter().all(|p| p.topic == SHIPMENTS));
    }
}

#[test]
fn the_stream_is_sorted_by_arrival_and_has_every_fate_with_its_records() {
    let (planned, fates) = generate(2_000, 7);
    assert!((2_000..2_003).contains(&planned.len()), "{}", planned.len());
    assert!(planned.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    for f in Fate::ALL {
        assert!(fates.contains(&f), "no {f:?} in {} orders", fates.len());
    }
    let count = |topic| planned.iter().filter(|p| p.topic == topic).count();
    let intended = |n: fn(Intended) -> usize| fates.iter().map(|f| n(f.intended())).sum::<usize>();
    assert_eq!(count(ORDERS), fates.len());
    assert_eq!(count(PAYMENTS), intended(|i| i.payments));
    // A shipment after the window or a delayed one is not in the order's result.
    let unseen = fates
        .iter()
        .filter(|f| matches!(f, Fate::ShippedLate | Fate::Delayed))
        .count();
    assert_eq!(count(SHIPMENTS), intended(|i| i.shipments) + unseen);
    let shipped = fates.iter().filter(|f| **f == Fate::Shipped).count();
    assert!(shipped * 100 / fates.len() > 60, "{shipped} shipped");
}

#[test]
fn only_a_delayed_shipment_arrives_after_its_timestamp_and_never_near_the_end() {
    let (planned, _) = generate(2_000, 3);
    let last_order = planned
        .iter()
        .filter(|p| p.topic == ORDERS)
        .map(|p| p.timestamp)
        .max()
        .unwrap();
    for p in &planned {
        let delay = p.arrival - p.timestamp;
        assert!(
            delay == 0 || (p.topic == SHIPMENTS && delay == DELAY_MS),
            "{p:?}"
        );
        // The stream goes on past its arrival for long enough to have made it late.
        if delay > 0 {
            assert!(p.arrival + WINDOW_MS < last_order, "{p:?}");
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_stream() {
    assert_eq!(generate(300, 42), generate(300, 42));
    assert_ne!(generate(300, 42).0, generate(300, 43).0);
}
