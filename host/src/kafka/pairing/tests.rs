use super::*;
use crate::event::Side;
const LEFT: Side = Side::LEFT;
const RIGHT: Side = Side::RIGHT;

fn both(ps: &[i32]) -> Vec<(Side, i32)> {
    ps.iter().flat_map(|&p| [(LEFT, p), (RIGHT, p)]).collect()
}

#[test]
fn an_eager_rebalance_stops_every_task_and_starts_them_again_when_assigned() {
    let mut pairing = Pairing::new(true);
    let (changes, settled) = pairing.apply(&[], &both(&[0, 1, 2]), 0);
    assert_eq!(changes.start, vec![(0, None), (1, None), (2, None)]);
    assert_eq!(settled, Some(Settled { took_ms: 0 }));

    // Revoke everything: the tasks stop, and the rebalance lasts until the assignment.
    let (changes, settled) = pairing.apply(&both(&[0, 1, 2]), &[], 100);
    assert_eq!(changes.stop, vec![0, 1, 2]);
    assert!(changes.pause.is_empty());
    assert_eq!(settled, None);
    let (changes, settled) = pairing.apply(&[], &both(&[0, 1]), 350);
    assert_eq!(changes.start, vec![(0, None), (1, None)]);
    assert_eq!(settled, Some(Settled { took_ms: 250 }));
}

#[test]
fn a_lone_half_is_paused_until_its_pair_comes_then_the_task_starts_with_the_wait() {
    let mut pairing = Pairing::new(false);
    let (changes, settled) = pairing.apply(&[], &[(LEFT, 3)], 1_000);
    assert_eq!(changes.pause, vec![(LEFT, 3)]);
    assert!(changes.start.is_empty());
    assert_eq!(settled, None);
    assert_eq!(pairing.waiting(), 1);
    assert!(!pairing.is_active(3));

    let (changes, settled) = pairing.apply(&[], &[(RIGHT, 3)], 1_400);
    assert_eq!(changes.start, vec![(3, Some(400))]);
    assert!(changes.pause.is_empty());
    assert_eq!(settled, Some(Settled { took_ms: 400 }));
    assert!(pairing.is_active(3));
    assert_eq!(pairing.waiting(), 0);
}

#[test]
fn losing_one_partition_stops_only_that_task_and_pauses_the_half_left() {
    let mut pairing = Pairing::new(false);
    pairing.apply(&[], &both(&[0, 1, 2]), 0);
    let (changes, settled) = pairing.apply(&[(RIGHT, 1)], &[], 50);
    assert_eq!(changes.stop, vec![1]);
    assert_eq!(changes.pause, vec![(LEFT, 1)]);
    assert!(changes.start.is_empty());
    assert_eq!(settled, None, "left-1 waits: the rebalance is not over");
    assert!(pairing.is_active(0) && pairing.is_active(2));

    // Then the other half goes too: nothing waits, the rebalance is over, nothing restarts.
    let (changes, settled) = pairing.apply(&[(LEFT, 1)], &[], 80);
    assert_eq!(changes, Changes::default());
    assert_eq!(settled, Some(Settled { took_ms: 30 }));
    assert_eq!(pairing.waiting(), 0);
}

#[test]
fn a_task_that_gets_a_half_back_restarts_from_its_commit_after_its_wait() {
    let mut pairing = Pairing::new(false);
    pairing.apply(&[], &both(&[4]), 0);
    pairing.apply(&[(LEFT, 4)], &[], 10);
    let (changes, _) = pairing.apply(&[], &[(LEFT, 4)], 70);
    assert_eq!(changes.start, vec![(4, Some(60))]);
}

#[test]
fn an_incremental_delta_that_changes_nothing_held_is_no_rebalance() {
    let mut pairing = Pairing::new(false);
    pairing.apply(&[], &both(&[0]), 0);
    assert_eq!(pairing.apply(&[], &[], 5), (Changes::default(), None));
}

#[test]
fn an_empty_eager_assignment_ends_the_rebalance() {
    let mut pairing = Pairing::new(true);
    pairing.apply(&[], &both(&[0]), 0);
    pairing.apply(&both(&[0]), &[], 10);
    assert_eq!(pairing.assigned_nothing(30), Some(Settled { took_ms: 20 }));
}

#[test]
fn a_three_topic_task_starts_only_with_all_three_partitions_and_stops_when_any_goes() {
    let third = Side::of(2);
    let mut pairing = Pairing::with_topics(3, false);
    // Two of three: both paused, no task.
    let (changes, _) = pairing.apply(&[], &[(LEFT, 4), (RIGHT, 4)], 0);
    assert!(changes.start.is_empty());
    assert_eq!(changes.pause, vec![(LEFT, 4), (RIGHT, 4)]);
    assert!(!pairing.is_active(4));
    let (changes, settled) = pairing.apply(&[], &[(third, 4)], 250);
    assert_eq!(changes.start, vec![(4, Some(250))]);
    assert_eq!(settled, Some(Settled { took_ms: 250 }));
    assert_eq!(pairing.held(), vec![vec![4], vec![4], vec![4]]);
    // The third topic's partition moves away: the task stops, the other two wait paused.
    let (changes, _) = pairing.apply(&[(third, 4)], &[], 300);
    assert_eq!(changes.stop, vec![4]);
    assert_eq!(changes.pause, vec![(LEFT, 4), (RIGHT, 4)]);
    assert_eq!(pairing.held(), vec![vec![4], vec![4], vec![]]);
}
