//! The files of a new plugin project, per language: embedded in the binary from `host/templates/`
//! (so `cojoin plugin new` needs nothing else installed), with `{{name}}` replaced by the
//! plugin's name. Every project also gets the WIT contract, a `cojoin.toml` for
//! `cojoin plugin test`, and sample events.
//!
//! A project joins two topics (world `plugin`: `on-match(key, a, b)`) or, with `--topics 3` to 8,
//! several (world `plugin-n`: `on-match-n(key, events)`). The two kinds share every file but the
//! action and its unit tests (`templates/n/`), the join's topics in `cojoin.toml`, and the
//! samples, which are generated for the N topics ([`n_way_samples`]).

use std::path::{Path, PathBuf};

use super::{Lang, ProjectError};

/// One file of a project: its path inside the project and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    pub path: String,
    pub text: String,
}

/// The topics a project may join: 2 (world `plugin`) to [`crate::event::MAX_TOPICS`].
pub const TOPICS: std::ops::RangeInclusive<usize> = 2..=crate::event::MAX_TOPICS;

/// The topics of a new project's join, the first N of these.
const TOPIC_NAMES: [&str; crate::event::MAX_TOPICS] = [
    "orders",
    "payments",
    "shipments",
    "deliveries",
    "invoices",
    "reviews",
    "refunds",
    "returns",
];

/// Where `include_str!` finds a template, relative to this file.
macro_rules! template {
    ($path:literal) => {
        include_str!(concat!("../../templates/", $path))
    };
}

const COMMON: [(&str, &str); 2] = [
    ("wit/plugin.wit", include_str!("../../../wit/plugin.wit")),
    ("cojoin.toml", template!("common/cojoin.toml")),
];

/// The samples of a two-topic project (an N-way project's are generated).
const TWO_TOPIC_SAMPLES: [(&str, &str); 3] = [
    (
        "samples/events.jsonl",
        template!("common/samples/events.jsonl"),
    ),
    ("samples/order.json", template!("common/samples/order.json")),
    (
        "samples/payment.json",
        template!("common/samples/payment.json"),
    ),
];

/// Some of a project's files: (path, template text).
type Files = &'static [(&'static str, &'static str)];

/// The action and its unit tests, per language: two topics, then N.
const PYTHON_CODE: [[(&str, &str); 2]; 2] = [
    [
        ("app.py", template!("python/app.py")),
        ("tests/test_app.py", template!("python/tests/test_app.py")),
    ],
    [
        ("app.py", template!("n/python/app.py")),
        ("tests/test_app.py", template!("n/python/tests/test_app.py")),
    ],
];
const RUST_CODE: [[(&str, &str); 1]; 2] = [
    [("src/lib.rs", template!("rust/src/lib.rs"))],
    [("src/lib.rs", template!("n/rust/src/lib.rs"))],
];
const JS_CODE: [[(&str, &str); 2]; 2] = [
    [
        ("plugin.js", template!("js/plugin.js")),
        ("test/plugin.test.js", template!("js/test/plugin.test.js")),
    ],
    [
        ("plugin.js", template!("n/js/plugin.js")),
        ("test/plugin.test.js", template!("n/js/test/plugin.test.js")),
    ],
];

const PYTHON: [(&str, &str); 8] = [
    ("README.md", template!("python/README.md")),
    (".gitignore", template!("python/gitignore")),
    ("tests/conftest.py", template!("python/tests/conftest.py")),
    (
        "tests/stand_ins/componentize_py_types.py",
        template!("python/tests/stand_ins/componentize_py_types.py"),
    ),
    (
        "tests/stand_ins/wit_world/__init__.py",
        template!("python/tests/stand_ins/wit_world/__init__.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/__init__.py",
        template!("python/tests/stand_ins/wit_world/imports/__init__.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/types.py",
        template!("python/tests/stand_ins/wit_world/imports/types.py"),
    ),
    (
        "tests/stand_ins/wit_world/imports/host.py",
        template!("python/tests/stand_ins/wit_world/imports/host.py"),
    ),
];

const RUST: [(&str, &str); 3] = [
    // Not named Cargo.toml in the repository, where cargo would take it for a package.
    ("Cargo.toml", template!("rust/Cargo.toml.tmpl")),
    ("README.md", template!("rust/README.md")),
    (".gitignore", template!("rust/gitignore")),
];

const JS: [(&str, &str); 3] = [
    ("package.json", template!("js/package.json")),
    ("README.md", template!("js/README.md")),
    (".gitignore", template!("js/gitignore")),
];

/// A name is used as a directory, a Rust package, an upload name and inside generated text.
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    let bad = |problem| {
        Err(ProjectError::BadName {
            name: name.to_owned(),
            problem,
        })
    };
    if name.is_empty() || name.len() > 64 {
        return bad("is empty or too long");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return bad("does not start with a letter");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return bad("holds characters other than letters, digits, '-' and '_'");
    }
    // Cargo refuses these as package names (they clash with the standard crates).
    if ["test", "core", "std", "alloc", "proc_macro"].contains(&name) {
        return bad("is a name Rust reserves");
    }
    Ok(())
}

/// The files of a new `lang` project named `name` that joins `topics` topics.
pub fn files(lang: Lang, name: &str, topics: usize) -> Result<Vec<ProjectFile>, ProjectError> {
    check_name(name)?;
    if !TOPICS.contains(&topics) {
        return Err(ProjectError::BadTopics(topics));
    }
    let n_way = usize::from(topics > 2);
    let (own, code): (Files, Files) = match lang {
        Lang::Python => (&PYTHON, &PYTHON_CODE[n_way]),
        Lang::Rust => (&RUST, &RUST_CODE[n_way]),
        Lang::Js => (&JS, &JS_CODE[n_way]),
    };
    let names = &TOPIC_NAMES[..topics];
    let samples: Vec<(String, String)> = if topics == 2 {
        TWO_TOPIC_SAMPLES
            .iter()
            .map(|&(path, text)| (path.to_owned(), text.to_owned()))
            .collect()
    } else {
        n_way_samples(names)
    };
    let fill = |text: &str| {
        placeholders(lang, names)
            .iter()
            .fold(text.to_owned(), |text, (from, to)| text.replace(from, to))
            .replace("{{name}}", name)
    };
    Ok(code
        .iter()
        .chain(own)
        .chain(COMMON.iter())
        .map(|&(path, text)| ProjectFile {
            path: path.to_owned(),
            text: fill(text),
        })
        .chain(
            samples
                .into_iter()
                .map(|(path, text)| ProjectFile { path, text }),
        )
        .collect())
}

/// What differs in the shared files between a two-topic and an N-way project.
fn placeholders(lang: Lang, topics: &[&str]) -> [(&'static str, String); 3] {
    let n_way = topics.len() > 2;
    let calls = match (lang, n_way) {
        (Lang::Js, false) => "`onMatch(key, a, b)` and `onExpire(key, event, side)`",
        (Lang::Js, true) => "`onMatchN(key, events)` and `onExpireN(key, event, partners)`",
        (_, false) => "`on_match(key, a, b)` and `on_expire(key, event, side)`",
        (_, true) => "`on_match_n(key, events)` and `on_expire_n(key, event, partners)`",
    };
    let (join_topics, call_args) = if n_way {
        let list: Vec<String> = topics.iter().map(|t| format!("{t:?}")).collect();
        let events: Vec<String> = topics
            .iter()
            .map(|t| format!("--event samples/{t}.json"))
            .collect();
        (
            format!(
                "# Your topics: on-match-n gets one event of each, in this order, with the same key.\n\
                 topics = [{}]",
                list.join(", ")
            ),
            events.join(" "),
        )
    } else {
        (
            "# Your two topics: on-match gets a (from left) and b (from right) with the same key.\n\
             left = \"orders\"\nright = \"payments\""
                .to_owned(),
            "--a samples/order.json --b samples/payment.json".to_owned(),
        )
    };
    [
        ("{{calls}}", calls.to_owned()),
        ("{{join_topics}}", join_topics),
        ("{{call_args}}", call_args),
    ]
}

/// The samples of an N-way project: `events.jsonl` with four orders (as the two-topic samples:
/// a match, an order alone, an order with only part of its partners, another match: 2 matches
/// and 2 expiries in a left join), and one event per topic (`samples/<topic>.json`, order-1's)
/// for `cojoin plugin call --event ...`.
pub fn n_way_samples(topics: &[&str]) -> Vec<(String, String)> {
    const T0: i64 = 1_764_680_400_000;
    // (key, amount, time of its order, how many topics get an event, ms between them)
    let orders: [(&str, u32, i64, usize, i64); 4] = [
        ("order-1", 20, T0, topics.len(), 1_000),
        ("order-2", 35, T0 + 1_000, 1, 0),
        // Only the second topic: its window closes (10 s + 2 s grace) at order-4's records.
        ("order-3", 5, T0 + 20_000, 2, 1_000),
        ("order-4", 12, T0 + 40_000, topics.len(), 500),
    ];
    let mut events: Vec<(i64, usize, &str, serde_json::Value)> = Vec::new();
    for (key, amount, at, count, step) in orders {
        for i in 0..count {
            let value = match i {
                0 => serde_json::json!({ "amount": amount }),
                1 => serde_json::json!({"method": "card"}),
                2 => serde_json::json!({"carrier": "post"}),
                _ => serde_json::json!({ "step": i }),
            };
            events.push((at + step * i as i64, i, key, value));
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    let mut offsets = vec![0; topics.len()];
    let mut lines = String::new();
    let mut samples = Vec::new();
    for (timestamp, i, key, value) in events {
        let line = serde_json::json!({
            "topic": topics[i], "partition": 0, "offset": offsets[i], "timestamp": timestamp,
            "key": key, "value": value,
        })
        .to_string();
        offsets[i] += 1;
        if key == "order-1" {
            samples.push((format!("samples/{}.json", topics[i]), format!("{line}\n")));
        }
        lines.push_str(&line);
        lines.push('\n');
    }
    samples.insert(0, ("samples/events.jsonl".to_owned(), lines));
    samples
}

/// Writes a new project into `dir`, which must not exist yet (nothing is overwritten).
pub fn write(dir: &Path, files: &[ProjectFile]) -> Result<(), ProjectError> {
    if dir.exists() {
        return Err(ProjectError::Exists(dir.to_owned()));
    }
    for file in files {
        let path: PathBuf = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(ProjectError::io(parent))?;
        }
        std::fs::write(&path, &file.text).map_err(ProjectError::io(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_gets_the_contract_a_config_samples_and_its_name_everywhere() {
        for (lang, topics) in Lang::ALL.into_iter().flat_map(|l| [(l, 2), (l, 3), (l, 8)]) {
            let files = files(lang, "fraud-check", topics).unwrap();
            let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
            for common in ["wit/plugin.wit", "cojoin.toml", "samples/events.jsonl"] {
                assert!(paths.contains(&common), "{lang}: {paths:?}");
            }
            let mut unique = paths.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), paths.len(), "{lang} {topics}: {paths:?}");
            for f in &files {
                assert!(
                    !f.text.contains("{{"),
                    "{lang} {}: a placeholder left",
                    f.path
                );
            }
            let config = files.iter().find(|f| f.path == "cojoin.toml").unwrap();
            let config = crate::config::Config::parse(&config.text).unwrap();
            assert_eq!(
                config.plugin.path,
                std::path::Path::new("build/fraud-check.wasm")
            );
            assert_eq!(config.join.topics, TOPIC_NAMES[..topics], "{lang}");
            // The action is the one of its world.
            let code = &files[0].text;
            let n_way_call = ["on_match_n", "onMatchN"].iter().any(|c| code.contains(c));
            assert_eq!(n_way_call, topics > 2, "{lang} {topics}");
        }
    }

    #[test]
    fn a_topic_count_outside_two_to_eight_is_refused_with_the_range() {
        for bad in [0, 1, 9] {
            let err = files(Lang::Rust, "p", bad).unwrap_err().to_string();
            assert!(err.contains("2 to 8"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_sample_events_are_what_plugin_test_and_call_read() {
        for topics in [2, 3, 5] {
            let files = files(Lang::Python, "p", topics).unwrap();
            let text = |path: &str| files.iter().find(|f| f.path == path).unwrap().text.clone();
            for line in text("samples/events.jsonl").lines() {
                crate::json::event_from_json(line).unwrap();
            }
            let singles: Vec<String> = if topics == 2 {
                vec!["samples/order.json".into(), "samples/payment.json".into()]
            } else {
                TOPIC_NAMES[..topics]
                    .iter()
                    .map(|t| format!("samples/{t}.json"))
                    .collect()
            };
            for path in singles {
                crate::json::keyed_event_from_json(&text(&path)).unwrap();
            }
        }
    }

    /// The N-way samples hold what their doc says: every topic's order-1 and order-4 events within
    /// 10 s of each other, order-2 alone, order-3 with the second topic only, in time order with
    /// each topic's offsets counting up from 0.
    #[test]
    fn the_n_way_samples_give_two_matches_and_two_orders_left_with_what_they_found() {
        let topics = &TOPIC_NAMES[..4];
        let samples = n_way_samples(topics);
        let events: Vec<crate::event::Event> = samples[0]
            .1
            .lines()
            .map(|l| crate::json::event_from_json(l).unwrap())
            .collect();
        assert_eq!(events.len(), 4 + 1 + 2 + 4);
        assert!(events.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
        for topic in topics {
            let offsets: Vec<i64> = events
                .iter()
                .filter(|e| &*e.topic == *topic)
                .map(|e| e.offset)
                .collect();
            assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
        }
        let of = |key: &str| -> Vec<(&str, i64)> {
            events
                .iter()
                .filter(|e| e.key.as_deref() == Some(key.as_bytes()))
                .map(|e| (&*e.topic, e.timestamp))
                .collect()
        };
        for key in ["order-1", "order-4"] {
            let found = of(key);
            assert_eq!(found.len(), 4, "{key}");
            let span = found.iter().map(|e| e.1).max().unwrap() - found[0].1;
            assert!(span <= 10_000, "{key}: {found:?}");
        }
        assert_eq!(of("order-2").len(), 1);
        let three = of("order-3");
        assert_eq!(
            three.iter().map(|e| e.0).collect::<Vec<_>>(),
            ["orders", "payments"]
        );
        assert_eq!(samples.len(), 1 + topics.len());
    }

    #[test]
    fn a_name_that_is_not_a_plain_identifier_is_refused_with_the_rule() {
        for bad in ["", "1st", "a/b", "../x", "a b", "test", &"x".repeat(65)] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.contains("e.g. order-paid"), "{bad:?}: {err}");
        }
        check_name("order_paid-2").unwrap();
    }
}
