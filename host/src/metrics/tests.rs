use std::time::Duration;

use super::*;

/// A page with a sample in every family, as a host that has run a while shows it.
fn busy() -> Metrics {
    let m = Metrics::default();
    for (topic, n) in [("orders", 7), ("payments", 5)] {
        m.records_consumed
            .get_or_create(&Topic {
                topic: topic.into(),
            })
            .inc_by(n);
    }
    m.matches.inc_by(3);
    m.expiries.inc_by(2);
    m.late_records.inc();
    m.state_spilled_bytes.inc_by(4096);
    m.outputs_produced.inc_by(6);
    m.dead_letters_produced.inc_by(2);
    m.records_produced.inc_by(8);
    m.commits.inc_by(4);
    m.plugin_swaps.inc();
    m.rebalances.inc();
    m.rebalance_seconds.inc_by(1.5);
    m.transaction_commit_seconds.inc_by(0.25);
    m.pair_wait_seconds.inc_by(2.0);
    m.set_member(Some("m-1".into()));
    m.set_group_protocol("consumer");
    m.tasks_waiting_for_pair.set(1);
    m.repartition_held_records.set(9);
    m.assigned_tasks.set(1);
    m.paused_partitions.set(1);
    m.set_task(
        2,
        &TaskGauges {
            events: 4,
            bytes: 400,
            ram_bytes: 300,
            disk_bytes: 100,
            queued_bytes: 1_000,
            queued_peak_bytes: 2_000,
            paused: 1,
            lag: vec![Some(5), Some(0)],
            waited_ms: 1_500,
        },
    );
    let mut stats = CallStats::default();
    stats.observe(Duration::from_micros(3), None);
    stats.observe(Duration::from_micros(40), Some(FailureKind::Timeout));
    stats.recycles = 1;
    m.add_calls("odd\"name@abc", &stats);
    m
}

/// The families of a page, as `# TYPE` lines name them.
fn families(page: &str) -> Vec<&str> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[test]
fn latencies_fall_in_their_bucket_and_quantiles_read_the_bounds() {
    let mut stats = CallStats::default();
    for us in [3, 8, 8, 40, 2_000_000] {
        stats.observe(Duration::from_micros(us), None);
    }
    stats.observe(Duration::from_micros(8), Some(FailureKind::Crash));
    assert_eq!(&stats.latency.buckets[..4], &[1, 3, 0, 1]);
    assert_eq!(
        stats.latency.buckets[LATENCY_BUCKETS.len()],
        1,
        "2 s is above the last bound"
    );
    assert_eq!(stats.quantile(0.5), Some(0.000_01));
    assert_eq!(stats.quantile(0.99), Some(f64::INFINITY));
    assert_eq!(stats.failures.get(&FailureKind::Crash), Some(&1));
    assert_eq!(CallStats::default().quantile(0.5), None);
}

#[test]
fn the_text_format_has_cumulative_buckets_and_escaped_labels() {
    let m = Metrics::default();
    m.records_consumed
        .get_or_create(&Topic {
            topic: "orders".into(),
        })
        .inc_by(7);
    m.matches.inc_by(3);
    m.assigned_tasks.set(1);
    m.paused_partitions.set(1);
    m.set_task(
        2,
        &TaskGauges {
            events: 4,
            bytes: 400,
            queued_bytes: 1_000,
            paused: 1,
            lag: vec![Some(5), None],
            waited_ms: 250,
            ..TaskGauges::default()
        },
    );
    let mut matched = Counts::<MatchBounds>::default();
    matched.observe(0.003);
    m.match_latency.add(&matched);
    let mut stats = CallStats::default();
    stats.observe(Duration::from_micros(3), None);
    stats.observe(Duration::from_micros(40), Some(FailureKind::Timeout));
    m.add_calls("odd\"name@abc", &stats);
    let text = m.render();
    for line in [
        "cojoin_records_consumed_total{topic=\"orders\"} 7",
        "cojoin_matches_total 3",
        "cojoin_assigned_tasks 1",
        "cojoin_state_events{task=\"2\"} 4",
        "cojoin_state_bytes{task=\"2\"} 400",
        "cojoin_queue_bytes{task=\"2\"} 1000",
        "cojoin_paused_partitions 1",
        "cojoin_consumer_lag{task=\"2\",side=\"left\"} 5",
        "cojoin_task_waited_seconds{task=\"2\"} 0.25",
        "cojoin_match_latency_seconds_bucket{le=\"0.0025\"} 0",
        "cojoin_match_latency_seconds_bucket{le=\"0.005\"} 1",
        "cojoin_match_latency_seconds_count 1",
        "cojoin_plugin_call_seconds_bucket{le=\"0.000005\",plugin=\"odd\\\"name@abc\"} 1",
        "cojoin_plugin_call_seconds_bucket{le=\"0.00005\",plugin=\"odd\\\"name@abc\"} 2",
        "cojoin_plugin_call_seconds_bucket{le=\"+Inf\",plugin=\"odd\\\"name@abc\"} 2",
        "cojoin_plugin_call_seconds_count{plugin=\"odd\\\"name@abc\"} 2",
        "cojoin_plugin_call_failures_total{plugin=\"odd\\\"name@abc\",kind=\"timeout\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(!text.contains("side=\"right\""), "unknown lag is left out");
}

#[test]
fn a_task_no_longer_held_leaves_the_page_and_counters_add_up_over_rounds() {
    let m = busy();
    m.set_task(
        3,
        &TaskGauges {
            lag: vec![None, Some(1)],
            ..TaskGauges::default()
        },
    );
    m.forget_task(2);
    let text = m.render();
    assert!(!text.contains("task=\"2\""), "{text}");
    assert!(text.contains("cojoin_state_events{task=\"3\"} 0"), "{text}");
    assert!(text.contains("cojoin_consumer_lag{task=\"3\",side=\"right\"} 1"));

    let mut stats = CallStats::default();
    stats.observe(Duration::from_micros(3), Some(FailureKind::Timeout));
    m.add_calls("odd\"name@abc", &stats);
    let (calls, failures) = m.plugin_calls("odd\"name@abc");
    assert_eq!(calls, 3);
    assert_eq!(failures, BTreeMap::from([("timeout", 2)]));
    assert_eq!(m.plugin_calls("never@0"), (0, BTreeMap::new()));
    let sum: f64 = m
        .render()
        .lines()
        .find_map(|l| l.strip_prefix("cojoin_plugin_call_seconds_sum{plugin=\"odd\\\"name@abc\"} "))
        .and_then(|v| v.parse().ok())
        .expect("a sum");
    assert!((sum - 0.000_046).abs() < 1e-12, "{sum}");
}

#[test]
fn info_families_carry_the_latest_fact_and_failing_seconds_count_from_the_start() {
    let m = busy();
    m.set_member(Some("m-2".into()));
    m.set_group_protocol("classic");
    let text = m.render();
    assert!(text.contains("cojoin_group_member{member_id=\"m-2\"} 1"));
    assert!(!text.contains("m-1"), "{text}");
    assert!(text.contains("cojoin_group_protocol{protocol=\"classic\"} 1"));
    assert!(text.contains("cojoin_repartition_failing_seconds 0\n"));
    assert!(m.processing(), "a task is held");
    assert!(!Metrics::default().processing());

    let failing = &m.repartition_failing_seconds;
    assert_eq!(failing.elapsed(), None);
    failing.start();
    let first = failing.elapsed().expect("started");
    failing.start();
    assert!(failing.elapsed().expect("still started") >= first);
    failing.stop();
    assert_eq!(failing.elapsed(), None);
}

#[test]
fn the_families_are_the_ones_dashboards_and_docs_know() {
    let page = busy().render();
    let mut expected = vec![
        ("cojoin_records_consumed", "counter"),
        ("cojoin_matches", "counter"),
        ("cojoin_expiries", "counter"),
        ("cojoin_late_records", "counter"),
        ("cojoin_match_latency_seconds", "histogram"),
        ("cojoin_future_timestamp_records", "counter"),
        ("cojoin_null_key_records", "counter"),
        ("cojoin_tombstone_records", "counter"),
        ("cojoin_dead_lettered_records", "counter"),
        ("cojoin_refused_outputs", "counter"),
        ("cojoin_replay_suppressed", "counter"),
        ("cojoin_backpressure_pauses", "counter"),
        ("cojoin_state_spilled_bytes", "counter"),
        ("cojoin_state_read_back_bytes", "counter"),
        ("cojoin_table_updates", "counter"),
        ("cojoin_table_misses", "counter"),
        ("cojoin_table_too_old", "counter"),
        ("cojoin_table_restored_records", "counter"),
        ("cojoin_table_restore_seconds", "counter"),
        ("cojoin_table_rows", "gauge"),
        ("cojoin_table_bytes", "gauge"),
        ("cojoin_records_produced", "counter"),
        ("cojoin_outputs_produced", "counter"),
        ("cojoin_dead_letters_produced", "counter"),
        ("cojoin_commits", "counter"),
        ("cojoin_commit_failures", "counter"),
        ("cojoin_plugin_swaps", "counter"),
        ("cojoin_repartitioned_records", "counter"),
        ("cojoin_repartition_dead_letters", "counter"),
        ("cojoin_repartition_dropped", "counter"),
        ("cojoin_plugin_swaps_refused", "counter"),
        ("cojoin_rebalances", "counter"),
        ("cojoin_transactions_committed", "counter"),
        ("cojoin_transactions_aborted", "counter"),
        ("cojoin_pair_waits", "counter"),
        ("cojoin_task_waited_seconds", "gauge"),
        ("cojoin_tasks_assigned", "counter"),
        ("cojoin_tasks_revoked", "counter"),
        ("cojoin_tasks_halted", "counter"),
        ("cojoin_consumer_errors", "counter"),
        ("cojoin_end_offsets_asked", "counter"),
        ("cojoin_end_offsets_behind", "counter"),
        ("cojoin_delivery_retries", "counter"),
        ("cojoin_rebalance_seconds", "counter"),
        ("cojoin_transaction_commit_seconds", "counter"),
        ("cojoin_pair_wait_seconds", "counter"),
        ("cojoin_group_protocol", "gauge"),
        ("cojoin_group_member", "gauge"),
        ("cojoin_tasks_waiting_for_pair", "gauge"),
        ("cojoin_assigned_tasks", "gauge"),
        ("cojoin_state_events", "gauge"),
        ("cojoin_state_bytes", "gauge"),
        ("cojoin_state_ram_bytes", "gauge"),
        ("cojoin_state_disk_bytes", "gauge"),
        ("cojoin_queue_bytes", "gauge"),
        ("cojoin_queue_peak_bytes", "gauge"),
        ("cojoin_repartition_held_records", "gauge"),
        ("cojoin_repartition_failing_seconds", "gauge"),
        ("cojoin_paused_partitions", "gauge"),
        ("cojoin_consumer_lag", "gauge"),
        ("cojoin_plugin_call_seconds", "histogram"),
        ("cojoin_plugin_call_failures", "counter"),
        ("cojoin_plugin_instance_recycles", "counter"),
    ];
    let mut found: Vec<(&str, &str)> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    expected.sort_unstable();
    found.sort_unstable();
    assert_eq!(found, expected);
    // Every help text is a sentence, and the registry's period is not doubled.
    let helps: Vec<&str> = page.lines().filter(|l| l.starts_with("# HELP ")).collect();
    assert_eq!(helps.len(), expected.len());
    assert!(
        helps.iter().all(|l| l.ends_with('.') && !l.ends_with("..")),
        "{helps:#?}"
    );
}

#[test]
fn the_readme_lists_every_metric_family_the_host_exports() {
    let readme = include_str!("../../../README.md");
    let page = busy().render();
    let missing: Vec<&str> = families(&page)
        .into_iter()
        .filter(|family| {
            // Listed as the family or as its counter (`_total`); labels may follow.
            ![
                format!("`{family}`"),
                format!("`{family}{{"),
                format!("`{family}_total"),
            ]
            .iter()
            .any(|spelled| readme.contains(spelled.as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "README's /metrics list lacks {missing:?}"
    );
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_the_host_exports() {
    let dashboard = include_str!("../../../examples/grafana/cojoin-dashboard.json");
    let page = busy().render();
    let families = families(&page);
    let mut queried = 0;
    for (i, _) in dashboard.match_indices("cojoin_") {
        let name: String = dashboard[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        // The dashboard's uid and title are "cojoin"; metric names go on past the prefix.
        if name == "cojoin_" {
            continue;
        }
        // OpenMetrics names a counter's family without its `_total`, a histogram's without
        // `_bucket`.
        let family = name
            .strip_suffix("_bucket")
            .or_else(|| name.strip_suffix("_total"))
            .unwrap_or(&name);
        assert!(
            families.contains(&family),
            "the dashboard queries {name}, which /metrics does not export"
        );
        queried += 1;
    }
    assert!(queried >= 10, "only {queried} metric queries found");
}
