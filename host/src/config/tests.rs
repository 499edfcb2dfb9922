//! Parsing whole files: the defaults a user sees, and each refusal naming its field.

use std::time::Duration;

use super::*;

/// Every section but `[output]`.
macro_rules! without_output {
    () => {
        r#"
    [kafka]
    bootstrap_servers = "localhost:9092"
    group_id = "g"
    [join]
    left = "orders"
    right = "payments"
    window = "5m"
    [plugin]
    path = "p.wasm"
"#
    };
}

const MINIMAL: &str = concat!(
    without_output!(),
    r#"
    [output]
    topic = "out"
    dead_letter_topic = "dlq"
"#
);

#[test]
fn a_minimal_file_gets_the_documented_defaults() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.join.kind, Kind::Inner);
    assert_eq!(c.join.grace, Duration::ZERO);
    assert_eq!(c.join.max_idle, Duration::from_millis(100));
    // Left out: the 5 min window plus no grace.
    assert_eq!(c.join.max_future, Duration::from_secs(300));
    assert_eq!(c.join.late, RecordPolicy::DeadLetter);
    assert_eq!(c.plugin.deadline, Duration::from_millis(500));
    assert_eq!(c.plugin.memory_mib, 256);
    assert_eq!(c.plugin.failure, FailurePolicy::DeadLetter);
    assert_eq!(c.plugin.retries, 2);
    assert!(c.plugin.watch);
    assert_eq!(c.plugin.workers, None);
    assert!(c.plugin.workers() >= 1, "one per core");
    assert!(c.admin.enabled);
    assert_eq!(c.admin.bind, "127.0.0.1:9464");
    assert_eq!(c.memory.queue_bytes, 64 << 20);
    assert_eq!(c.memory.state_bytes, 1 << 30);
    assert_eq!(c.state.dir(), std::env::temp_dir().join("cojoin-state"));
    assert_eq!(c.output.compression, Compression::None);
}

#[test]
fn output_compression_takes_librdkafka_s_codec_names_and_refuses_others_by_field() {
    let parse = |output: &str| {
        Config::parse(&format!(
            "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n{output}",
            without_output!()
        ))
    };
    for (text, codec) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let c = parse(&format!("compression = \"{text}\"")).unwrap();
        assert_eq!(c.output.compression, codec);
        assert_eq!(codec.as_str(), text, "the name librdkafka takes");
    }
    let e = parse("compression = \"brotli\"").unwrap_err().to_string();
    assert!(
        e.contains("[output] compression") && e.contains("brotli") && e.contains("`zstd`"),
        "{e}"
    );
}

#[test]
fn memory_budgets_take_units_and_a_tiny_queue_is_refused_by_name() {
    let with = |memory: &str| format!("{MINIMAL}\n[memory]\n{memory}\n");
    let c = Config::parse(&with("queue_bytes = \"16MiB\"\nstate_bytes = 268435456")).unwrap();
    assert_eq!(
        (c.memory.queue_bytes, c.memory.state_bytes),
        (16 << 20, 256 << 20)
    );
    let err = Config::parse(&with("queue_bytes = \"1KiB\""))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("memory.queue_bytes") && err.contains("4MiB"),
        "{err}"
    );
    // No floor for state: zero puts every full segment of join state on disk.
    let c = Config::parse(&with("state_bytes = 0")).unwrap();
    assert_eq!(c.memory.state_bytes, 0);
    let err = Config::parse(&with("queue_bytes = \"lots\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("lots") && err.contains("64MiB"), "{err}");
}

#[test]
fn an_admin_server_off_loopback_needs_a_token() {
    let open = format!("{MINIMAL}\n[admin]\nbind = \"0.0.0.0:9464\"\n");
    let err = Config::parse(&open).unwrap_err().to_string();
    assert!(
        err.contains("admin.token") && err.contains("bind to 127.0.0.1"),
        "{err}"
    );
    Config::parse(&format!("{open}token = \"s3cret\"\n")).unwrap();
    for empty in ["", "  "] {
        let err = Config::parse(&format!("{open}token = \"{empty}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("admin.token") && err.contains("empty"),
            "{err}"
        );
    }
    let bad = format!("{MINIMAL}\n[admin]\nbind = \"localhost\"\n");
    let err = Config::parse(&bad).unwrap_err().to_string();
    assert!(
        err.contains("admin.bind") && err.contains("ip:port"),
        "{err}"
    );
}

#[test]
fn admin_tls_needs_both_cert_and_key_and_a_client_ca_needs_them() {
    let admin = |fields: &str| format!("{MINIMAL}\n[admin]\n{fields}\n");
    let cases = [
        ("tls_cert = \"c.pem\"", "admin.tls_key"),
        ("tls_key = \"k.pem\"", "admin.tls_cert"),
        ("tls_client_ca = \"ca.pem\"", "admin.tls_client_ca"),
    ];
    for (fields, field) in cases {
        let err = Config::parse(&admin(fields)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("`{field}`")) && err.contains("admin.tls_cert and admin.tls_key"),
            "{fields}: {err}"
        );
    }
    // Names only: the files are read when the server starts (admin::tls).
    let c = Config::parse(&admin(
        "tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\ntls_client_ca = \"ca.pem\"",
    ))
    .unwrap();
    let files = c.admin.tls_files().unwrap().unwrap();
    assert_eq!(files.cert, std::path::Path::new("c.pem"));
    assert_eq!(files.client_ca, Some(std::path::Path::new("ca.pem")));
    assert_eq!(
        Config::parse(MINIMAL).unwrap().admin.tls_files().unwrap(),
        None
    );
}

#[test]
fn an_unknown_field_is_refused_by_name() {
    let text = MINIMAL.replace("window = \"5m\"", "window = \"5m\"\nwindw = \"1s\"");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(err.contains("windw"), "{err}");
}

#[test]
fn join_max_future_left_out_is_window_plus_grace_between_a_minute_and_an_hour() {
    let max_future = |join: &str| {
        let text = MINIMAL.replace("window = \"5m\"", join);
        Config::parse(&text).unwrap().join.max_future
    };
    // The probe's join: a record 59 min ahead was inside the old 1 h default and made every
    // later record of a 10 s window late. Now one more than a minute ahead is refused.
    assert_eq!(
        max_future("window = \"10s\"\ngrace = \"2s\""),
        Duration::from_secs(60)
    );
    assert_eq!(
        max_future("window = \"5m\"\ngrace = \"30s\""),
        Duration::from_secs(330)
    );
    assert_eq!(max_future("window = \"2h\""), Duration::from_secs(3600));
    assert_eq!(
        max_future("window = \"10m\"\ngrace = \"55m\""),
        Duration::from_secs(3600)
    );
    // Set, it is kept as written, whatever the window.
    for (set, kept) in [("1h", 3600), ("3h", 3 * 3600), ("0s", 0)] {
        assert_eq!(
            max_future(&format!("window = \"10s\"\nmax_future = \"{set}\"")),
            Duration::from_secs(kept)
        );
    }
}

#[test]
fn a_bad_duration_names_the_value_and_the_form() {
    let err = Config::parse(&MINIMAL.replace("\"5m\"", "\"5 minutes\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("5 minutes") && err.contains("30s"), "{err}");
}

#[test]
fn a_memory_cap_past_what_wasm32_addresses_is_refused_not_wrapped() {
    let with = |mib: &str| {
        MINIMAL.replace(
            "path = \"p.wasm\"",
            &format!("path = \"p.wasm\"\nmemory_mib = {mib}"),
        )
    };
    let err = Config::parse(&with("17592186044417"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plugin.memory_mib") && err.contains("4096"),
        "{err}"
    );
    assert_eq!(
        Config::parse(&with("4096")).unwrap().plugin.memory_mib,
        4096
    );
}

#[test]
fn zero_workers_is_refused_and_a_number_is_kept() {
    let with = |n: &str| {
        MINIMAL.replace(
            "path = \"p.wasm\"",
            &format!("path = \"p.wasm\"\nworkers = {n}"),
        )
    };
    let err = Config::parse(&with("0")).unwrap_err().to_string();
    assert!(
        err.contains("plugin.workers") && err.contains("one per core"),
        "{err}"
    );
    assert_eq!(Config::parse(&with("3")).unwrap().plugin.workers(), 3);
}

#[test]
fn retries_and_backoff_past_their_bounds_or_holding_a_record_too_long_are_refused() {
    let with = |plugin: &str| {
        MINIMAL.replace("path = \"p.wasm\"", &format!("path = \"p.wasm\"\n{plugin}"))
    };
    // The defaults: 100 ms + 200 ms of backoff, three calls of up to 500 ms.
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(
        c.plugin.worst_case_per_record(),
        Duration::from_millis(1_800)
    );
    // The issue's settings: 1+2+4+8+16 s and six calls. No longer a stall of the host (the
    // task waits off its worker), and under max.poll.interval.ms: taken.
    let c = Config::parse(&with("retries = 5\nbackoff = \"1s\"")).unwrap();
    assert_eq!(c.plugin.worst_case_per_record(), Duration::from_secs(34));

    let err = Config::parse(&with("retries = 101\nbackoff = \"1ms\""))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`plugin.retries`")
            && err.contains("more than 100")
            && err.contains("at most 100"),
        "{err}"
    );
    let err = Config::parse(&with("backoff = \"31s\""))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`plugin.backoff`") && err.contains("30s") && err.contains("at most \"30s\""),
        "{err}"
    );
    // 1+2+4+8+16 s, then 30 s (the cap) 15 times: 481 s, past the 300 s default.
    let twenty = with("retries = 20\nbackoff = \"1s\"");
    let err = Config::parse(&twenty).unwrap_err().to_string();
    assert!(
        err.contains("`plugin.retries`")
            && err.contains("max.poll.interval.ms (300s)")
            && err.contains("lower plugin.retries, plugin.backoff or plugin.deadline"),
        "{err}"
    );
    // Kafka told to allow longer: taken.
    let longer = twenty.replace(
        "group_id = \"g\"",
        "group_id = \"g\"\n[kafka.options]\n\"max.poll.interval.ms\" = \"600000\"",
    );
    let c = Config::parse(&longer).unwrap();
    assert_eq!(
        c.plugin.worst_case_per_record(),
        Duration::from_millis(481_000 + 21 * 500)
    );
}

#[test]
fn join_partitions_past_the_bound_is_refused_by_name() {
    let with = |n: &str| {
        MINIMAL.replace(
            "window = \"5m\"",
            &format!("window = \"5m\"\npartitions = {n}"),
        )
    };
    let err = Config::parse(&with("100000")).unwrap_err().to_string();
    assert!(
        err.contains("join.partitions") && err.contains("more than 10000"),
        "{err}"
    );
    assert_eq!(
        Config::parse(&with("64")).unwrap().join.partitions,
        Some(64)
    );
}

#[test]
fn joining_a_topic_with_itself_is_refused() {
    let err = Config::parse(&MINIMAL.replace("\"payments\"", "\"orders\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("join.right"), "{err}");
}

#[test]
fn dead_letter_policies_need_a_dead_letter_topic() {
    let err = Config::parse(&MINIMAL.replace("dead_letter_topic = \"dlq\"", ""))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("output.dead_letter_topic") && err.contains("drop / halt"),
        "{err}"
    );
    let text = MINIMAL
        .replace("dead_letter_topic = \"dlq\"", "")
        .replace(
            "window = \"5m\"",
            "window = \"5m\"\nlate = \"drop\"\nnull_keys = \"drop\"",
        )
        .replace("path = \"p.wasm\"", "path = \"p.wasm\"\nfailure = \"halt\"");
    Config::parse(&text).unwrap();
}

#[test]
fn a_missing_required_field_is_named() {
    let err = Config::parse(&MINIMAL.replace("group_id = \"g\"", ""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("group_id"), "{err}");
}

fn err(output: &str) -> String {
    Config::parse(&format!("{}\n[output]\n{output}", without_output!()))
        .unwrap_err()
        .to_string()
}

#[test]
fn outputs_to_the_join_s_own_input_topics_are_refused_with_the_field() {
    let e = err("topic = \"orders\"\ndead_letter_topic = \"dlq\"");
    assert!(
        e.contains("output.topic") && e.contains("input topic"),
        "{e}"
    );
    let e = err("topic = \"out\"\ndead_letter_topic = \"payments\"");
    assert!(e.contains("output.dead_letter_topic"), "{e}");
    let e = err(
        "topic = \"out\"\ndead_letter_topic = \"dlq\"\nallowed_topics = [\"audit\", \"orders\"]",
    );
    assert!(
        e.contains("output.allowed_topics") && e.contains("\"orders\""),
        "{e}"
    );
    let ok = Config::parse(&format!(
        "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\nallowed_topics = [\"audit\"]",
        without_output!()
    ))
    .unwrap();
    assert_eq!(ok.output.allowed_topics, Some(vec!["audit".to_owned()]));
}

#[test]
fn exactly_once_commits_every_100_ms_unless_told_and_refuses_options_it_sets() {
    let parse = |output: &str| {
        Config::parse(&format!(
            "{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n{output}",
            without_output!()
        ))
    };
    let alo = parse("").unwrap();
    assert_eq!(alo.output.guarantee, Guarantee::AtLeastOnce);
    assert_eq!(alo.output.commit_interval(), Duration::from_secs(1));
    let eos = parse("guarantee = \"exactly-once\"").unwrap();
    assert_eq!(eos.output.commit_interval(), Duration::from_millis(100));
    let eos = parse("guarantee = \"exactly-once\"\ncommit_interval = \"250ms\"").unwrap();
    assert_eq!(eos.output.commit_interval(), Duration::from_millis(250));
    let e = parse("commit_interval = \"0s\"").unwrap_err().to_string();
    assert!(e.contains("output.commit_interval"), "{e}");
    let e = parse("guarantee = \"exactly-twice\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("exactly-twice"), "{e}");
    let e = Config::parse(
        &format!("{}\n[output]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\nguarantee = \"exactly-once\"", without_output!())
            .replace("[join]", "[kafka.options]\n\"transactional.id\" = \"x\"\n[join]"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("transactional.id"), "{e}");
}

mod table;
mod topics;
