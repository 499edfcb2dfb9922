//! `join.topics`: the N-way spelling, its keys, and what it refuses.

use super::MINIMAL;
use crate::config::{Config, KeySelector, Kind};
use crate::event::Side;

const TWO: &str = "left = \"orders\"\n    right = \"payments\"";

fn with_join(lines: &str) -> Result<Config, String> {
    Config::parse(&MINIMAL.replace(TWO, lines)).map_err(|e| e.to_string())
}

#[test]
fn three_topics_with_a_key_from_a_value_resolve_per_topic() {
    let c = with_join(
        "topics = [\"orders\", \"payments\", \"shipments\"]\nkeys = { shipments = \"/order_id\" }\nkind = \"left\"",
    )
    .unwrap();
    assert_eq!(c.join.topics, ["orders", "payments", "shipments"]);
    assert_eq!(c.join.kind, Kind::Left);
    assert_eq!(c.join.selector(Side::of(0)), &KeySelector::RecordKey);
    assert_eq!(c.join.selector(Side::of(1)), &KeySelector::RecordKey);
    assert_eq!(
        c.join.selector(Side::of(2)),
        &KeySelector::Pointer("/order_id".into())
    );
    assert!(!c.join.keys_from_records());
    // The two-topic code paths read the first two as left and right.
    assert_eq!(
        (c.join.left.as_str(), c.join.right.as_str()),
        ("orders", "payments")
    );
}

#[test]
fn left_and_right_are_the_two_topic_spelling_of_topics() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.join.topics, ["orders", "payments"]);
    assert!(c.join.keys_from_records());
    let two = with_join("topics = [\"orders\", \"payments\"]").unwrap();
    assert_eq!(two.join.topics, c.join.topics);
    assert_eq!(two.join.selectors, c.join.selectors);
}

#[test]
fn each_wrong_topics_setting_is_refused_by_field_with_a_fix() {
    let cases: [(&str, &[&str]); 7] = [
        (
            "topics = [\"a\", \"b\", \"c\"]\nleft = \"a\"",
            &["join.topics", "one way"],
        ),
        (
            "topics = [\"a\", \"b\", \"c\"]\nleft_key = \"/id\"",
            &["join.topics", "join.keys"],
        ),
        (
            "topics = [\"a\"]",
            &["join.topics", "lists 1 topics", "2 to 8"],
        ),
        (
            "topics = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\"]",
            &["lists 9 topics"],
        ),
        (
            "topics = [\"a\", \"b\", \"a\"]",
            &["join.topics", "\"a\" twice"],
        ),
        (
            "topics = [\"a\", \"b\", \"c\"]\nkeys = { d = \"/id\" }",
            &["join.keys", "\"d\""],
        ),
        (
            "topics = [\"a\", \"b\", \"c\"]\nkind = \"outer\"",
            &["join.kind", "\"left\""],
        ),
    ];
    for (lines, wanted) in cases {
        let err = with_join(lines).expect_err(lines);
        for w in wanted {
            assert!(err.contains(w), "{lines}: {err} (wanted {w:?})");
        }
    }
    let err = with_join("left = \"a\"").unwrap_err();
    assert!(
        err.contains("join.right") && err.contains("is missing"),
        "{err}"
    );
    let err = with_join("left = \"a\"\nright = \"b\"\nkeys = { a = \"/id\" }").unwrap_err();
    assert!(
        err.contains("join.keys") && err.contains("left_key"),
        "{err}"
    );
    let never = with_join(
        "topics = [\"a\", \"b\", \"c\"]\nkeys = { c = \"/id\" }\nrepartition = \"never\"",
    )
    .unwrap_err();
    assert!(
        never.contains("join.keys") && never.contains("never"),
        "{never}"
    );
}
