//! A run stops at its byte or time budget, and the next one goes on.

use super::*;

#[test]
fn a_run_stops_at_its_batch_budget_and_the_next_run_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for i in 0..10 {
        let key = format!("k{i}");
        task.push(Side::LEFT, ev(Side::LEFT, i, &key, 100 + i));
        task.push(Side::RIGHT, ev(Side::RIGHT, i, &key, 100 + i));
    }
    // Room for about one match's output and inputs: each run stops after the record that
    // passed it, and says so.
    task.set_batch_budget(1);
    let mut outputs = 0;
    for _ in 0..10 {
        let batch = task.run(0, &mut plugin);
        assert!(batch.is_full());
        assert_eq!(values(&batch).len(), 1, "{:?}", values(&batch));
        outputs += batch.emits.len();
        task.acknowledge(batch);
    }
    assert_eq!(outputs, 10);
    assert_eq!(task.queued(), 0);
    task.set_batch_budget(usize::MAX);
    assert!(!task.run(0, &mut plugin).is_full());
}

#[test]
fn a_run_stops_at_its_time_budget_and_the_next_run_goes_on() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for i in 0..40 {
        let key = format!("k{i}");
        task.push(Side::LEFT, ev(Side::LEFT, i, &key, 100 + i));
        task.push(Side::RIGHT, ev(Side::RIGHT, i, &key, 100 + i));
    }
    // No time at all: the clock is read every 16 records, so each run takes 15 (it stops
    // before the 16th) and says it is full; 80 records take 6 runs.
    task.set_time_budget(Duration::ZERO);
    let mut runs = 0;
    let mut outputs = 0;
    loop {
        let before = task.queued();
        let batch = task.run(0, &mut plugin);
        runs += 1;
        let full = batch.is_full();
        outputs += batch.emits.len();
        task.acknowledge(batch);
        if !full {
            break;
        }
        assert_eq!(before - task.queued(), 15);
    }
    assert_eq!((runs, outputs, task.queued()), (6, 40, 0));
}
