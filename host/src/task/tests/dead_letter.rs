//! Records rejected by policy, and outputs refused: dead-lettered, or under halt, a halt.

use super::*;

#[test]
fn null_keys_and_late_records_are_dead_lettered_and_tombstones_dropped_by_policy() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(
        Side::LEFT,
        Event {
            key: None,
            ..ev(Side::LEFT, 0, "", 100)
        },
    );
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "k", 200));
    task.push(Side::RIGHT, ev(Side::RIGHT, 1, "k", 150)); // late: 150 < 200 - 10
    let mut tomb = ev(Side::LEFT, 1, "k", 201);
    tomb.value = None;
    task.push(Side::LEFT, tomb);
    let batch = task.run(0, &mut plugin);
    assert_eq!(values(&batch), ["dlq NullKey [0]", "dlq Late [1]"]);
    assert_eq!(
        (
            task.counters.null_keys,
            task.counters.late,
            task.counters.tombstones
        ),
        (1, 1, 1)
    );
    assert!(plugin.calls.is_empty(), "{:?}", plugin.calls);
}

#[test]
fn an_output_to_an_input_topic_or_outside_the_allowed_ones_dead_letters_its_inputs() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    for (offset, key) in [(0, "to:left"), (1, "to:audit")] {
        task.push(Side::LEFT, ev(Side::LEFT, offset, key, 100));
        task.push(Side::RIGHT, ev(Side::RIGHT, offset, key, 101));
    }
    let batch = task.run(0, &mut plugin);
    let v = values(&batch);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].starts_with("dlq OutputRefused")
            && v[0].contains("an input topic")
            && v[0].ends_with("[0, 0]"),
        "{v:?}"
    );
    // Without output.allowed_topics, any other topic is the plugin's to choose.
    assert_eq!(v[1], "out paid");
    assert_eq!(task.counters.refused_outputs, 1);
    assert_eq!(task.counters.dead_lettered, 2);

    let allowed = TaskPolicy {
        outputs: OutputTopics {
            inputs: vec!["left".into(), "right".into()],
            internal: Vec::new(),
            allowed: Some(vec!["orders-paid".into()]),
        },
        ..policy()
    };
    let mut task = PartitionTask::new(0, allowed, FRESH);
    task.push(Side::LEFT, ev(Side::LEFT, 0, "to:audit", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "to:audit", 101));
    let v = values(&task.run(0, &mut plugin));
    assert!(
        v.len() == 1 && v[0].contains("not in output.allowed_topics"),
        "{v:?}"
    );
}

#[test]
fn an_output_to_an_internal_repartition_topic_dead_letters_its_inputs() {
    let mut task = PartitionTask::new(0, policy(), FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, 0, "to:g-right-repartition", 100));
    task.push(
        Side::RIGHT,
        ev(Side::RIGHT, 0, "to:g-right-repartition", 101),
    );
    let v = values(&task.run(0, &mut plugin));
    assert!(
        v.len() == 1 && v[0].starts_with("dlq OutputRefused") && v[0].contains("an internal topic"),
        "{v:?}"
    );
    assert_eq!(task.counters.refused_outputs, 1);
}

#[test]
fn under_halt_a_refused_output_stops_the_task_before_its_inputs_count_as_processed() {
    let halt = TaskPolicy {
        failure: FailurePolicy::Halt,
        ..policy()
    };
    let mut task = PartitionTask::new(0, halt, FRESH);
    let mut plugin = FakePlugin::default();
    task.push(Side::LEFT, ev(Side::LEFT, 0, "to:right", 100));
    task.push(Side::RIGHT, ev(Side::RIGHT, 0, "to:right", 101));
    let batch = task.run(0, &mut plugin);
    assert!(batch.emits.is_empty());
    let reason = task.halted().expect("halted");
    assert!(
        reason.contains("was refused") && reason.contains("\"to:right\""),
        "{reason}"
    );
    task.acknowledge(batch);
    assert_eq!(
        task.commit_points()
            .iter()
            .map(|p| (p.offset, p.processed_through))
            .collect::<Vec<_>>(),
        [(0, None), (0, None)]
    );
}
