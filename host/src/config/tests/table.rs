//! `[join.table]`: a table join's spelling, its defaults, and what it refuses.

use std::time::Duration;

use super::MINIMAL;
use crate::config::{Config, TableModeSetting};
use crate::join::table::TableMode;
use crate::repartition;

/// MINIMAL's `[join]` lines, replaced by a table join's.
const JOIN: &str = "left = \"orders\"\n    right = \"payments\"\n    window = \"5m\"";

fn with_join(lines: &str) -> Result<Config, String> {
    Config::parse(&MINIMAL.replace(JOIN, lines)).map_err(|e| e.to_string())
}

const TABLE: &str = "left = \"orders\"\nleft_key = \"/customer_id\"\nkind = \"left\"\ntable = { topic = \"customers\" }";

#[test]
fn a_table_join_needs_no_window_and_defaults_to_versioned_with_an_hour_of_history() {
    let c = with_join(TABLE).unwrap();
    assert_eq!(c.join.topics, ["orders", "customers"]);
    assert_eq!(c.join.right, "customers");
    let table = c.join.table.as_ref().unwrap();
    assert_eq!(table.mode, TableModeSetting::Versioned);
    assert_eq!(table.history, Duration::from_secs(3600));
    assert_eq!(
        table.mode(),
        TableMode::Versioned {
            history_retention_ms: 3_600_000
        }
    );
    let latest =
        with_join("left = \"orders\"\ntable = { topic = \"customers\", mode = \"latest\" }")
            .unwrap();
    assert_eq!(latest.join.table.unwrap().mode(), TableMode::Latest);
    // join.right may name the table too.
    with_join("left = \"orders\"\nright = \"customers\"\ntable = { topic = \"customers\", history = \"10m\" }")
        .unwrap();
}

#[test]
fn the_stream_is_repartitioned_to_the_tables_count_never_the_table() {
    let c = with_join(TABLE).unwrap();
    let plan = repartition::plan(&c.join, "g", &[12, 3]);
    assert_eq!(plan.partitions, 3);
    assert_eq!(plan.sides.len(), 1);
    assert_eq!(plan.sides[0].source, "orders");
    let record_keys = with_join("left = \"orders\"\ntable = { topic = \"customers\" }").unwrap();
    let plan = repartition::plan(&record_keys.join, "g", &[2, 6]);
    assert_eq!(
        plan.partitions, 6,
        "the table's count, though the stream's is smaller"
    );
    assert_eq!(plan.join_topics, ["g-orders-repartition", "customers"]);
}

#[test]
fn what_a_table_join_cannot_do_is_refused_naming_the_field_and_the_fix() {
    let refused = [
        (
            "left = \"orders\"\nright = \"payments\"\ntable = { topic = \"customers\" }",
            "`join.right`: names \"payments\" while join.table.topic names \"customers\"",
        ),
        (
            "topics = [\"orders\", \"a\", \"b\"]\ntable = { topic = \"customers\" }",
            "`join.topics`: is set with join.table",
        ),
        (
            "left = \"orders\"\nright_key = \"/id\"\ntable = { topic = \"customers\" }",
            "`join.right_key`: is /id with join.table",
        ),
        (
            "left = \"orders\"\nwindow = \"5m\"\ntable = { topic = \"customers\" }",
            "`join.window`: is set with join.table; leave it out",
        ),
        (
            "left = \"orders\"\ngrace = \"5s\"\ntable = { topic = \"customers\" }",
            "`join.grace`: is set with join.table",
        ),
        (
            "left = \"orders\"\nkind = \"outer\"\ntable = { topic = \"customers\" }",
            "`join.kind`: is \"outer\" with join.table; use \"inner\"",
        ),
        (
            "left = \"orders\"\nrepartition = \"always\"\ntable = { topic = \"customers\" }",
            "`join.repartition`: is \"always\" with join.table",
        ),
        (
            "left = \"orders\"\npartitions = 4\ntable = { topic = \"customers\" }",
            "`join.partitions`: is set with join.table",
        ),
        (
            "left = \"orders\"\ntable = { topic = \"customers\", history = \"0s\" }",
            "`join.table.history`: is zero",
        ),
        (
            "left = \"orders\"\ntable = { topic = \"\" }",
            "`join.table.topic`: is empty",
        ),
        (
            "left = \"orders\"\ntable = { topic = \"orders\" }",
            "`join.right`: names \"orders\" twice",
        ),
        (
            "left = \"orders\"\ntable = { topic = \"customers\", mode = \"newest\" }",
            "unknown variant `newest`, expected `versioned` or `latest`",
        ),
    ];
    for (join, expected) in refused {
        let error = with_join(join)
            .err()
            .unwrap_or_else(|| panic!("accepted: {join}"));
        assert!(
            error.contains(expected),
            "{join}\n-> {error}\nwanted {expected}"
        );
    }
    // A stream join without a window is still refused.
    let error = with_join("left = \"orders\"\nright = \"payments\"").unwrap_err();
    assert!(
        error.contains("`join.window`: is missing or zero"),
        "{error}"
    );
}

#[test]
fn a_global_table_joins_its_latest_rows_and_the_group_reads_the_stream_alone() {
    let c = with_join(
        "left = \"orders\"\nleft_key = \"/customer_id\"\ntable = { topic = \"customers\", scope = \"global\" }",
    )
    .unwrap();
    assert!(c.join.table_is_global());
    assert_eq!(c.join.table.as_ref().unwrap().mode(), TableMode::Latest);
    // Read as it is, whatever the table's count: only a key from the value re-keys the stream.
    let plan = repartition::plan(&c.join, "g", &[12, 3]);
    assert_eq!(
        (plan.partitions, &plan.join_topics[..]),
        (12, &["g-orders-repartition".to_owned()][..])
    );
    let as_is =
        with_join("left = \"orders\"\ntable = { topic = \"customers\", scope = \"global\" }")
            .unwrap();
    let plan = repartition::plan(&as_is.join, "g", &[5, 2]);
    assert_eq!((plan.partitions, plan.sides.len()), (5, 0));
    assert_eq!(plan.join_topics, ["orders"]);
    assert_eq!(plan.join_counts(&[5, 2]), [5]);
    let error = with_join(
        "left = \"orders\"\ntable = { topic = \"customers\", scope = \"global\", mode = \"versioned\" }",
    )
    .unwrap_err();
    assert!(
        error.contains("`join.table.mode`: is \"versioned\" with scope = \"global\"; a global table joins with its latest row"),
        "{error}"
    );
}
