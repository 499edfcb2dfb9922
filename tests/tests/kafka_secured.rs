//! cojoin on a secured Apache Kafka (issue 28): `SASL_SSL` with SCRAM, PLAIN over TLS, mTLS, the
//! StandardAuthorizer denying whatever no ACL allows, and cojoin's principal holding only the ACLs
//! the README's "Security" section lists — read from the README itself, so the documentation and
//! the tests cannot drift apart. Each test starts its own secured broker (`Kafka::start_secured`).

use std::time::{Duration, Instant};

use cojoin_e2e::acl::{Acl, Operation, Pattern, ResourceType};
use cojoin_e2e::broker::{toml_options, Auth, Kafka};
use cojoin_e2e::hosts::{join_config_for, wait_for_stable_group, HostProcess};
use cojoin_e2e::scenario::{
    close_windows, run_dir, serial, start_hosts_with, tally_once_complete, PARTITIONS,
};
use cojoin_e2e::stream::{self, Tally};
use cojoin_e2e::{cojoin, plugin, root};

const PRINCIPAL: &str = "User:cojoin";
const ORDERS: u32 = 400;

/// Which features a config uses: each README ACL line says when it is needed.
#[derive(Clone, Copy, Default)]
struct Features {
    exactly_once: bool,
    auto_protocol: bool,
    repartitioning: bool,
}

/// The ACLs of the README's least-privilege block for `group`, as a host with `features` needs
/// them: every `$acls` line whose comment says `always`, or names a feature in use. The example's
/// dead-letter topic `orders-payments-dlq` is the suites' `dlq`.
fn documented_acls(group: &str, features: Features) -> Vec<Acl> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block = readme
        .split("**Least privilege.**")
        .nth(1)
        .expect("README has a **Least privilege.** paragraph")
        .split("```sh")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let mut acls = Vec::new();
    for line in block.lines().filter(|l| l.starts_with("$acls")) {
        let (command, when) = line
            .split_once('#')
            .expect("each ACL line says when it is needed");
        let when = when.trim();
        let needed = when.starts_with("always")
            || (when.starts_with("exactly-once") && features.exactly_once)
            || (when.starts_with("group_protocol auto") && features.auto_protocol)
            || (when.starts_with("repartitioning") && features.repartitioning);
        assert!(
            [
                "always",
                "exactly-once",
                "group_protocol auto",
                "repartitioning"
            ]
            .iter()
            .any(|w| when.starts_with(w)),
            "README ACL line with an unknown condition: {line}"
        );
        if !needed {
            continue;
        }
        let words: Vec<String> = command
            .replace("$G", group)
            .replace("orders-payments-dlq", "dlq")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let mut operations = Vec::new();
        let mut resources: Vec<(ResourceType, String)> = Vec::new();
        let mut prefixed = false;
        let mut i = 1;
        while i < words.len() {
            let next = || words[i + 1].clone();
            match words[i].as_str() {
                "--operation" => operations.push(operation(&next())),
                "--topic" => resources.push((ResourceType::Topic, next())),
                "--group" => resources.push((ResourceType::Group, next())),
                "--transactional-id" => resources.push((ResourceType::TransactionalId, next())),
                "--resource-pattern-type" => prefixed = next() == "prefixed",
                "--cluster" => {
                    resources.push((ResourceType::Cluster, String::new()));
                    i -= 1;
                }
                other => panic!("README ACL line: unknown word {other:?} in {line}"),
            }
            i += 2;
        }
        for op in &operations {
            for (kind, name) in &resources {
                let acl = match kind {
                    ResourceType::Topic => Acl::topic(name, *op, PRINCIPAL),
                    ResourceType::Group => Acl::group(name, *op, PRINCIPAL),
                    ResourceType::TransactionalId => Acl::transactional_id(name, *op, PRINCIPAL),
                    ResourceType::Cluster => Acl::cluster(*op, PRINCIPAL),
                };
                acls.push(if prefixed { acl.prefixed() } else { acl });
            }
        }
    }
    acls
}

fn operation(name: &str) -> Operation {
    match name {
        "Read" => Operation::Read,
        "Write" => Operation::Write,
        "Create" => Operation::Create,
        "Delete" => Operation::Delete,
        "DescribeConfigs" => Operation::DescribeConfigs,
        other => panic!("README ACL line: operation {other:?} not known to the test"),
    }
}

/// A secured broker with the suites' topics, created by the super user.
fn secured_broker(dir: &std::path::Path, payments_partitions: i32) -> Kafka {
    let kafka = Kafka::start_secured(dir);
    kafka.create_topic("orders", PARTITIONS);
    kafka.create_topic("payments", payments_partitions);
    kafka.create_topic("orders-paid", 1);
    kafka.create_topic("dlq", 1);
    kafka
}

/// The suites' join config, connecting as `cojoin` over `how`; the password, where there is one,
/// from the broker's password file (`{ file = … }`), never written into the config.
fn secured_config(kafka: &Kafka, group: &str, how: Auth, protocol: &str, extra: &str) -> String {
    let (bootstrap, settings) = kafka.cojoin_kafka_settings(how);
    let password_file = &kafka.security.as_ref().unwrap().cojoin.password_file;
    let options: Vec<(String, String)> = settings
        .into_iter()
        .filter(|(k, _)| k != "sasl.password")
        .collect();
    let mut options = toml_options(&options);
    if how != Auth::Mtls && how != Auth::OAuthBearer {
        options.push_str(&format!(
            "\"sasl.password\" = {{ file = {:?} }}\n",
            password_file
        ));
    }
    let config = join_config_for(
        protocol,
        &bootstrap,
        group,
        &plugin("order_paid_rust.wasm"),
        "left",
    );
    let config = if config.contains("[kafka.options]\n") {
        config.replace("[kafka.options]\n", &format!("[kafka.options]\n{options}"))
    } else {
        config.replace("[join]", &format!("[kafka.options]\n{options}[join]"))
    };
    config.replace(
        "dead_letter_topic = \"dlq\"",
        &format!("dead_letter_topic = \"dlq\"\n{extra}"),
    )
}

/// Reads `orders-paid` as the super user until every outcome of the first `n` orders is there.
fn tally(kafka: &Kafka, n: u32, topic: &str) -> Tally {
    let mut reader = kafka.reader(topic, 1);
    tally_once_complete(
        &mut reader,
        &stream::expected(n),
        Duration::from_secs(120),
        Duration::from_secs(3),
    )
}

/// The text of everything a host or a command wrote, to look for a secret in.
fn assert_secret_absent(secret: &str, outputs: &[(String, String)]) {
    assert!(
        secret.len() > 16,
        "a secret long enough not to match by chance"
    );
    for (what, text) in outputs {
        assert!(
            !text.contains(secret),
            "the SASL password appears in {what}"
        );
    }
}

/// `n` hosts with `config`; the first half of the orders; host-0 killed -9 once 50 outputs are
/// out; the second half (host-0 restarted then when `restart`); windows closed. The hosts.
#[must_use = "dropping the hosts kills them"]
fn kill_mid_stream(
    dir: &std::path::Path,
    kafka: &Kafka,
    n: usize,
    config: &str,
    restart: bool,
) -> Vec<HostProcess> {
    let mut hosts = start_hosts_with(dir, n, config);
    wait_for_stable_group(
        &hosts.iter().collect::<Vec<_>>(),
        PARTITIONS,
        Duration::from_secs(90),
    );
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS / 2), None);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 50);
    hosts[0].kill9();
    kafka.produce(&producer, &stream::orders(ORDERS / 2, ORDERS), None);
    if restart {
        hosts[0].restart(dir);
    }
    close_windows(kafka, &producer);
    hosts
}

#[test]
fn scram_three_hosts_and_a_kill_lose_nothing_with_only_the_documented_acls_and_leak_no_secret() {
    let _serial = serial();
    let test = "secured_scram_three_hosts";
    let dir = run_dir(test);
    let kafka = secured_broker(&dir, PARTITIONS);
    let acls = documented_acls(test, Features::default());
    kafka.grant(&acls);
    eprintln!(
        "granted {} ACLs: {}",
        acls.len(),
        acls.iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let config = secured_config(&kafka, test, Auth::Scram512, "classic", "");
    std::fs::write(dir.join("check.toml"), &config).unwrap();
    let check = cojoin(&[
        "check",
        "--config",
        dir.join("check.toml").to_str().unwrap(),
    ]);
    let check_out = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    eprintln!("{check_out}");
    assert!(
        check.status.success(),
        "check on the secured broker: {check_out}"
    );
    assert!(
        check_out.contains("connected with security.protocol SASL_SSL, SASL mechanism SCRAM-SHA-512, principal User:cojoin; TLSv1."),
        "{check_out}"
    );
    assert!(
        check_out.contains("broker certificate verified"),
        "{check_out}"
    );

    let hosts = kill_mid_stream(&dir, &kafka, 3, &config, false);
    let t = tally(&kafka, ORDERS, "orders-paid");
    eprintln!(
        "matches {}, expiries {}, duplicates {}",
        t.matches, t.expiries, t.duplicates
    );
    assert!(t.complete(), "{t:?}");

    let metrics = cojoin_e2e::http::get(&format!(
        "{}/metrics",
        hosts[1].admin_url(Duration::from_secs(5))
    ))
    .body;
    let mut outputs = vec![
        ("cojoin check".to_owned(), check_out),
        ("/metrics".to_owned(), metrics),
    ];
    for h in &hosts {
        outputs.push((format!("{}'s log", h.name), h.log_text()));
    }
    let password = &kafka.security.as_ref().unwrap().cojoin.password;
    assert_secret_absent(password, &outputs);
}

#[test]
fn exactly_once_on_the_secured_broker_repeats_nothing_after_a_kill() {
    let _serial = serial();
    let test = "secured_exactly_once";
    let dir = run_dir(test);
    let kafka = secured_broker(&dir, PARTITIONS);
    kafka.grant(&documented_acls(
        test,
        Features {
            exactly_once: true,
            ..Default::default()
        },
    ));
    let config = secured_config(
        &kafka,
        test,
        Auth::Scram512,
        "classic",
        "guarantee = \"exactly-once\"",
    );
    let _hosts = kill_mid_stream(&dir, &kafka, 2, &config, true);
    // The reader is librdkafka's: read_committed.
    let t = tally(&kafka, ORDERS, "orders-paid");
    eprintln!(
        "matches {}, expiries {}, duplicates {}",
        t.matches, t.expiries, t.duplicates
    );
    assert!(t.complete(), "{t:?}");
    assert_eq!(t.duplicates, 0, "{t:?}");
}

#[test]
fn a_repartitioned_join_on_the_secured_broker_joins_everything() {
    let _serial = serial();
    let test = "secured_repartition";
    let dir = run_dir(test);
    // payments with fewer partitions: cojoin re-keys it into an internal topic it creates.
    let kafka = secured_broker(&dir, 3);
    kafka.grant(&documented_acls(
        test,
        Features {
            repartitioning: true,
            ..Default::default()
        },
    ));
    let config = secured_config(&kafka, test, Auth::Scram256, "classic", "")
        .replace("max_idle = \"1s\"", "max_idle = \"1s\"\ngrace = \"1h\"");
    let hosts = start_hosts_with(&dir, 1, &config);
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS), None);
    // Far-ahead payments under many keys: every internal partition gets one, every window closes.
    let ticks: Vec<stream::Record> = (0..60)
        .map(|k| stream::Record {
            topic: "payments",
            key: format!("tick-{k}"),
            value: "{}".into(),
            timestamp: stream::BASE_TS + 20_000_000,
        })
        .collect();
    kafka.produce(&producer, &ticks, None);
    let t = tally(&kafka, ORDERS, "orders-paid");
    eprintln!("matches {}, expiries {}", t.matches, t.expiries);
    assert!(t.complete(), "{t:?}\n{}", hosts[0].log_text());
}

#[test]
fn hosts_over_mtls_and_over_plain_each_join_everything() {
    let _serial = serial();
    let dir = run_dir("secured_mtls_and_plain");
    let kafka = secured_broker(&dir, PARTITIONS);
    kafka.create_topic("orders-paid-plain", 1);
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS), None);
    close_windows(&kafka, &producer);
    for (how, group, output) in [
        (Auth::Mtls, "secured-mtls", "orders-paid"),
        (Auth::Plain, "secured-plain", "orders-paid-plain"),
    ] {
        let mut acls = documented_acls(group, Features::default());
        acls.push(Acl::topic(output, Operation::Write, PRINCIPAL));
        kafka.grant(&acls);
        let config = secured_config(&kafka, group, how, "classic", "")
            .replace("topic = \"orders-paid\"", &format!("topic = \"{output}\""));
        let mut host = HostProcess::start(&dir, group, &config);
        let t = tally(&kafka, ORDERS, output);
        eprintln!("{how:?}: matches {}, expiries {}", t.matches, t.expiries);
        assert!(t.complete(), "{how:?}: {t:?}\n{}", host.log_text());
        host.terminate();
        host.wait_exit(Duration::from_secs(60));
    }
}

/// Runs `cojoin check` and `cojoin run` with `config` (written to `dir/<name>.toml`); both must
/// fail naming `expected`.
fn assert_check_and_run_name(dir: &std::path::Path, name: &str, config: &str, expected: &str) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let check = cojoin(&["check", "--config", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(1),
        "check without {expected}:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("PROBLEM: ") && l.contains(expected)),
        "check without {expected:?} did not name it:\n{stdout}"
    );
    let mut host = HostProcess::start(dir, name, config);
    let (status, log) = host.wait_exit(Duration::from_secs(90));
    assert!(!status.success(), "run without {expected}: {status}\n{log}");
    assert!(
        log.contains(expected),
        "run without {expected:?} did not name it:\n{log}"
    );
}

#[test]
fn each_documented_acl_removed_is_named_by_check_and_stops_run() {
    let _serial = serial();
    let test = "secured_acl_table";
    let dir = run_dir(test);
    let kafka = secured_broker(&dir, 3);
    let all = Features {
        exactly_once: true,
        auto_protocol: true,
        repartitioning: true,
    };
    let acls = documented_acls(test, all);
    kafka.grant(&acls);
    let config = secured_config(
        &kafka,
        test,
        Auth::Scram512,
        "auto",
        "guarantee = \"exactly-once\"",
    );
    let internal = format!("{test}-payments-repartition");
    let t = Instant::now();
    // Before the internal topic exists only Create can be asked of it; once it exists (created
    // by an operator, as the README allows, or by a first run) the others.
    for phase in [
        "before the internal topic exists",
        "internal topic pre-created",
    ] {
        if phase.starts_with("internal") {
            kafka.create_topic(&internal, PARTITIONS);
        }
        for (i, acl) in acls.iter().enumerate() {
            let on_internal = acl.resource == ResourceType::Topic
                && internal.starts_with(&acl.name)
                && acl.pattern == Pattern::Prefixed;
            let checkable = match phase {
                "before the internal topic exists" => {
                    !on_internal || acl.operation == Operation::Create
                }
                _ => on_internal && acl.operation != Operation::Create,
            };
            if !checkable {
                continue;
            }
            let expected = match acl.resource {
                ResourceType::Topic if on_internal => {
                    format!("no {:?} on topic {internal}", acl.operation)
                }
                ResourceType::Topic => format!("no {:?} on topic {}", acl.operation, acl.name),
                ResourceType::Group => format!("no {:?} on group {}", acl.operation, acl.name),
                ResourceType::TransactionalId => format!(
                    "no {:?} on transactional ids prefixed {}",
                    acl.operation, acl.name
                ),
                ResourceType::Cluster => format!("no {:?} on the cluster", acl.operation),
            };
            kafka.revoke(std::slice::from_ref(acl));
            assert_check_and_run_name(&dir, &format!("without-{i}"), &config, &expected);
            eprintln!(
                "{phase}: without {acl}: check and run name {expected:?} ({:?})",
                t.elapsed()
            );
            kafka.grant(std::slice::from_ref(acl));
        }
    }
    // Everything granted: check passes.
    std::fs::write(dir.join("all.toml"), &config).unwrap();
    let check = cojoin(&["check", "--config", dir.join("all.toml").to_str().unwrap()]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn an_acl_removed_while_running_stops_the_host_and_loses_nothing() {
    let _serial = serial();
    let test = "secured_acl_removed_while_running";
    let dir = run_dir(test);
    let kafka = secured_broker(&dir, PARTITIONS);
    kafka.grant(&documented_acls(test, Features::default()));
    let config = secured_config(&kafka, test, Auth::Scram512, "classic", "");
    let mut host = HostProcess::start(&dir, "host-0", &config);
    wait_for_stable_group(&[&host], PARTITIONS, Duration::from_secs(90));
    let producer = kafka.producer("murmur2_random");
    kafka.produce(&producer, &stream::orders(0, ORDERS / 2), None);
    let mut reader = kafka.reader("orders-paid", 1);
    reader.read_until("first outputs", Duration::from_secs(60), |r| r.len() >= 50);

    let write = Acl::topic("orders-paid", Operation::Write, PRINCIPAL);
    kafka.revoke(std::slice::from_ref(&write));
    kafka.produce(&producer, &stream::orders(ORDERS / 2, ORDERS), None);
    close_windows(&kafka, &producer);
    let (status, log) = host.wait_exit(Duration::from_secs(90));
    assert!(!status.success(), "{status}");
    assert!(
        log.contains("no Write on topic orders-paid for User:cojoin (outputs): grant it with"),
        "{log}"
    );
    // Nothing lost: granted again, a restarted host produces every outcome.
    kafka.grant(std::slice::from_ref(&write));
    host.restart(&dir);
    let t = tally(&kafka, ORDERS, "orders-paid");
    eprintln!(
        "after the restart: matches {}, expiries {}, duplicates {}",
        t.matches, t.expiries, t.duplicates
    );
    assert!(t.complete(), "{t:?}");
}
