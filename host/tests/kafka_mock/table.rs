//! A table join (issue 33) on the mock cluster: `payments` read as a table, `orders` enriched
//! from it; after a graceful restart the table is restored from its beginning (its committed
//! offset is at its end), so orders of the second phase still find the rows of the first.

use super::*;

fn table_config(bootstrap: &str, group: &str) -> Config {
    table_config_scoped(bootstrap, group, "co-partitioned")
}

fn table_config_scoped(bootstrap: &str, group: &str, scope: &str) -> Config {
    Config::parse(&format!(
        r#"
        [kafka]
        bootstrap_servers = "{bootstrap}"
        group_id = "{group}"
        {CLASSIC}
        [join]
        left = "orders"
        kind = "left"
        max_idle = "100ms"
        table = {{ topic = "payments", scope = "{scope}" }}
        [plugin]
        path = "unused.wasm"
        [output]
        topic = "orders-paid"
        dead_letter_topic = "dlq"
        "#
    ))
    .unwrap()
}

/// Orders `from..to` keyed `order-{i % 100}`, each 1 s apart from `BASE_TS + from * 1000`.
fn produce_stream(p: &ThreadedProducer<DefaultProducerContext>, from: i64, to: i64) {
    for i in from..to {
        let key = format!("order-{}", i % 100);
        send(p, "orders", &key, "{}", BASE_TS + i * 1000, None);
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

/// A row `{"paid":true}` stamped `ts` in `payments` for each `order-{i}`.
fn produce_rows(
    p: &ThreadedProducer<DefaultProducerContext>,
    keys: impl Iterator<Item = i64>,
    ts: i64,
) {
    for i in keys {
        send(
            p,
            "payments",
            &format!("order-{i}"),
            "{\"paid\":true}",
            ts,
            None,
        );
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

/// A mock cluster whose `orders` has 4 partitions and `payments` 3.
fn uneven_cluster() -> (MockCluster<'static, DefaultProducerContext>, String) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", PARTITIONS, 1).unwrap();
    cluster.create_topic("payments", 3, 1).unwrap();
    cluster.create_topic("orders-paid", 1, 1).unwrap();
    cluster.create_topic("dlq", 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    (cluster, bootstrap)
}

fn counted(outputs: &[(String, String)], status: &str) -> usize {
    outputs.iter().filter(|(_, s)| s == status).count()
}

/// Waits until the metric `name` reads `want` (at most 60 s), and returns the page.
fn metric_reaches(host: &RunningHost, name: &str, want: u64) -> String {
    wait_for_page(host, &format!("{name} never read {want}"), |page| {
        sample(page, name) == Some(want)
    })
}

#[test]
fn a_table_join_enriches_every_record_and_restores_the_table_after_a_restart() {
    let (_cluster, bootstrap) = join_cluster();
    let group = format!("table-{}", std::process::id());
    let p = producer(&bootstrap);
    // The table: a row for three keys out of four, stamped before any order.
    produce_rows(&p, (0..100).filter(|i| i % 4 != 0), BASE_TS - 1000);
    produce_stream(&p, 0, 100);
    let host = start_host_config(table_config(&bootstrap, &group));
    // A left table join needs no window to close: every order is handed over at once.
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 100);
    assert_eq!(
        (counted(&outputs, "paid"), counted(&outputs, "unpaid")),
        (75, 25)
    );
    let page = metric_reaches(&host, "cojoin_table_restored_records_total", 75);
    for (name, want) in [
        ("cojoin_matches_total", 75),
        ("cojoin_expiries_total", 25),
        ("cojoin_table_updates_total", 75),
        ("cojoin_table_misses_total", 25),
        ("cojoin_table_too_old_total", 0),
        ("cojoin_dead_lettered_records_total", 0),
    ] {
        assert_eq!(sample(&page, name), Some(want), "{name}:\n{page}");
    }
    host.stop();

    // The same keys again, later: a new host finds their rows only by restoring the table.
    produce_stream(&p, 100, 200);
    let host = start_host_config(table_config(&bootstrap, &group));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 200);
    let page = metric_reaches(&host, "cojoin_table_restored_records_total", 75);
    assert_eq!(sample(&page, "cojoin_matches_total"), Some(75), "{page}");
    // Nothing repeated: the first phase's orders were committed.
    std::thread::sleep(Duration::from_secs(2));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= outputs.len());
    host.stop();
    assert_eq!(outputs.len(), 200, "no duplicates across the restart");
    assert_eq!(
        (counted(&outputs, "paid"), counted(&outputs, "unpaid")),
        (150, 50)
    );
}

#[test]
fn a_global_table_is_read_whole_by_every_host_and_followed_while_it_runs() {
    // The stream and the table need not be co-partitioned: 4 partitions against 3.
    let (_cluster, bootstrap) = uneven_cluster();
    let group = format!("global-{}", std::process::id());
    let p = producer(&bootstrap);
    produce_rows(&p, (0..100).filter(|i| i % 4 != 0), BASE_TS - 1000);
    produce_stream(&p, 0, 100);
    let host = start_host_config(table_config_scoped(&bootstrap, &group, "global"));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 100);
    assert_eq!(
        (counted(&outputs, "paid"), counted(&outputs, "unpaid")),
        (75, 25)
    );
    let page = metric_reaches(&host, "cojoin_table_restored_records_total", 75);
    assert_eq!(sample(&page, "cojoin_table_rows"), Some(75), "{page}");
    // Rows for the other keys while the host runs: followed, then joined.
    produce_rows(&p, (0..100).filter(|i| i % 4 == 0), BASE_TS);
    metric_reaches(&host, "cojoin_table_rows", 100);
    produce_stream(&p, 100, 200);
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 200);
    assert_eq!(
        (counted(&outputs, "paid"), counted(&outputs, "unpaid")),
        (175, 25)
    );
    host.stop();

    // A restart reads the whole table again before it joins.
    produce_stream(&p, 200, 300);
    let host = start_host_config(table_config_scoped(&bootstrap, &group, "global"));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= 300);
    let page = metric_reaches(&host, "cojoin_table_restored_records_total", 100);
    std::thread::sleep(Duration::from_secs(2));
    let outputs = read_outputs(&bootstrap, |o| o.len() >= outputs.len());
    host.stop();
    assert_eq!(sample(&page, "cojoin_matches_total"), Some(100), "{page}");
    assert_eq!(outputs.len(), 300, "no duplicates across the restart");
    assert_eq!(counted(&outputs, "paid"), 275);
}

#[test]
fn check_accepts_a_global_table_with_another_partition_count_than_the_stream() {
    let (_cluster, bootstrap) = uneven_cluster();
    let p = producer(&bootstrap);
    send(&p, "payments", "order-1", "{}", BASE_TS, None);
    produce_stream(&p, 0, 20);
    let global = table_config_scoped(&bootstrap, "check-global", "global");
    let report = cojoin::check::check(&global, 1_000).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(
        (report.lines.iter()).any(|l| l.starts_with("payments: a global table, read whole")),
        "{report:?}"
    );
    // Co-partitioned, the same topics need the stream re-keyed to the table's count.
    let co = table_config_scoped(&bootstrap, "check-co", "co-partitioned");
    let report = cojoin::check::check(&co, 1_000).unwrap();
    let repartitioned =
        (report.lines.iter()).any(|l| l.starts_with("repartitioning: orders is re-keyed"));
    assert!(repartitioned, "{report:?}");
}

#[test]
fn a_global_table_whose_topic_is_missing_stops_the_host_naming_it() {
    let (_cluster, bootstrap) = join_cluster();
    let mut config = table_config_scoped(&bootstrap, "global-missing", "global");
    config.join.table.as_mut().unwrap().topic = "customers".into();
    config.join.topics[1] = "customers".into();
    config.join.right = "customers".into();
    let host = start_host_config(config);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !host.thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the host ran on without its table"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let error = host.thread.join().unwrap().unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.contains("the global table's topic \"customers\" (join.table.topic) does not exist"),
        "{text}"
    );
}
