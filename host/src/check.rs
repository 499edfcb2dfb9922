//! `cojoin check`: what can be known before running — the config, whether `state.dir` takes this
//! host's spill directory, the broker, the two topics and their partition counts, the plugin, and
//! whether the producers of both topics put the same key in the same partition number (sampled
//! from the data). The local checks ([`state_dir_report`]) need no broker and are tested here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::join::SpillDir;
use crate::kafka::authz::Verdict;
use crate::kafka::partitioner::{self, Partitioner};
use crate::kafka::{assignment, protocol};

/// What the check found; `problems` empty means the join can run.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub lines: Vec<String>,
    pub problems: Vec<String>,
}

use crate::kafka::timeouts::REQUEST as TIMEOUT;

/// Reads up to `per_topic` keyed records from the start of each topic (all partitions).
/// No record for this long: the sampled topic has been read to its end.
const QUIET: Duration = Duration::from_secs(2);

fn sample(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: usize,
    per_topic: usize,
) -> Result<HashMap<Vec<u8>, i32>> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, TIMEOUT)
            .with_context(|| format!("reading the offsets of {topic} partition {p}"))?;
        if high > low {
            tpl.add_partition_offset(topic, p, Offset::Offset(low))?;
        }
    }
    let mut keys = HashMap::new();
    if tpl.count() == 0 {
        return Ok(keys);
    }
    consumer.assign(&tpl)?;
    // Read until the sample is full or the topic goes quiet. The watermarks only say whether a
    // partition has data: some brokers (tansu 0.6) report a high watermark below the real end.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last_record = Instant::now();
    let mut read = 0;
    while read < per_topic && Instant::now() < deadline && last_record.elapsed() < QUIET {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.with_context(|| format!("reading {topic}"))?;
            read += 1;
            last_record = Instant::now();
            if let Some(k) = m.key() {
                keys.insert(k.to_vec(), m.partition());
            }
        }
    }
    consumer.unassign()?;
    Ok(keys)
}

fn describe(p: &[Partitioner]) -> &'static str {
    match p {
        [Partitioner::Murmur2] => "murmur2 (Java default; librdkafka partitioner=murmur2_random)",
        [Partitioner::Crc32] => "CRC32 (librdkafka default consistent_random)",
        [] => "neither murmur2 nor CRC32 (a custom partitioner, or explicit partitions)",
        _ => "undetermined (too few keys)",
    }
}

/// Every check. A failure to reach the broker or read a topic is a problem like the others, so
/// what was found before it (a `state.dir` that will not do) is still said; the `Err` side is
/// left for callers that match on it.
pub fn check(config: &Config, per_topic: usize) -> Result<CheckReport> {
    let mut report = CheckReport::default();
    state_dir_report(&config.state.dir(), &mut report);
    if let Err(e) = broker_report(config, per_topic, &mut report) {
        report.problems.push(format!("{e:#}"));
    }
    Ok(report)
}

/// Tries `state.dir` as `cojoin run` uses it when it starts: creates this process's spill
/// directory under it ([`SpillDir::create`], which also clears the leftovers of dead hosts, as a
/// start does) and removes it again, with the directories above it that the try made. A bad
/// `state.dir` (a file, a parent that cannot be created, no write permission) was otherwise found
/// only when `run` stopped on it. Tried as the user running check: the host's user needs the same.
pub fn state_dir_report(base: &Path, report: &mut CheckReport) {
    // The missing part of the path, deepest first: created by the probe, so removed after it.
    let missing: Vec<PathBuf> = base
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .take_while(
            |p| matches!(p.symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound),
        )
        .map(Path::to_owned)
        .collect();
    // Dropped at once: the last `Arc` removes the spill directory.
    let probe = SpillDir::create(base).map(drop);
    for dir in &missing {
        // `remove_dir` takes only an empty directory: one a host started using meanwhile stays.
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
    match probe {
        Ok(()) => report.lines.push(format!(
            "state.dir {base:?}: this host's spill directory can be created there (tried as this user)"
        )),
        Err(e) => {
            let hint = base
                .ancestors()
                .find(|p| p.exists())
                .filter(|p| !p.is_dir())
                .map_or(String::new(), |p| format!(" ({p:?} is not a directory)"));
            report.problems.push(format!(
                "state.dir {base:?}: cannot create this host's spill directory there{hint}: {e}; \
                 make it a directory the host's user can write, or set state.dir to one (run refuses to start without it)"
            ));
        }
    }
}

/// What the broker says: topics, permissions, repartitioning, and where the producers put keys.
fn broker_report(config: &Config, per_topic: usize, report: &mut CheckReport) -> Result<()> {
    let mut topics: Vec<&str> = config.join.topics.iter().map(String::as_str).collect();
    // A group of its own that it never joins (librdkafka's assign needs one); a principal with no
    // ACL on it sees one GroupAuthorizationFailed logged by librdkafka, and nothing fails.
    let client =
        crate::kafka::client::reader(&config.kafka, &format!("{}-check", config.kafka.group_id));
    let consumer: BaseConsumer = client.create().context("creating a Kafka client")?;
    let metadata = consumer.fetch_metadata(None, TIMEOUT).with_context(|| {
        format!(
            "reaching the broker at {} (kafka.bootstrap_servers)",
            config.kafka.bootstrap_servers
        )
    })?;
    report.lines.push(format!(
        "broker reached: {} broker(s)",
        metadata.brokers().len()
    ));
    report.lines.push(crate::kafka::tls::connection_report(
        &config.kafka.bootstrap_servers,
        &config.kafka.options,
    ));
    let (protocol, why) =
        protocol::choose(config.kafka.group_protocol, &config.kafka.options, || {
            protocol::broker_protocols(&crate::kafka::client::base(&config.kafka))
        });
    report
        .lines
        .push(format!("group protocol {}: {why}", protocol.as_str()));
    let count = |topic: &str| {
        metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len())
    };
    // Without Describe on a topic the broker answers as if it did not exist: say so, not that.
    let hidden = |topic: &str| {
        metadata.topics().iter().any(|t| {
            t.name() == topic
                && t.error()
                    == Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
        })
    };
    let mut counts: Vec<usize> = topics.iter().map(|t| count(t)).collect();
    let listed: Vec<String> = (topics.iter().zip(&counts))
        .map(|(t, c)| format!("{t}: {c} partitions"))
        .collect();
    report.lines.push(listed.join("; "));
    let outputs = [
        ("output.topic", Some(&config.output.topic)),
        (
            "output.dead_letter_topic",
            config.output.dead_letter_topic.as_ref(),
        ),
    ];
    for (field, topic) in outputs {
        match topic {
            Some(topic) if hidden(topic) => report.lines.push(format!(
                "{field} {topic:?}: not visible to this principal (see the permission problems)"
            )),
            Some(topic) if count(topic) == 0 => report.problems.push(format!(
                "{field} {topic:?} does not exist on the broker: create it, or name an existing topic (run refuses to start without it)"
            )),
            Some(topic) => report.lines.push(format!("{field} {topic:?} exists")),
            None => {}
        }
    }
    let plan = crate::repartition::plan(&config.join, &config.kafka.group_id, &counts);
    permissions_report(config, &plan, report)?;
    if topics.iter().any(|t| hidden(t)) {
        // Partition counts and keys cannot be read until the permissions are granted.
        return Ok(());
    }
    if config.join.table_is_global() && counts[1] > 0 {
        report.lines.push(format!(
            "{}: a global table, read whole by every host: the stream needs no co-partitioning with it",
            topics[1]
        ));
        topics.truncate(1);
        counts.truncate(1);
    }
    if !counts.contains(&0) && !plan.sides.is_empty() {
        return repartition_report(config, &consumer, &plan, &counts, per_topic, report);
    }
    let named = match topics.as_slice() {
        [left, right] => format!("{left} and {right}"),
        [first @ .., last] => format!("{} and {last}", first.join(", ")),
        [] => String::new(),
    };
    report.lines.push(format!(
        "no repartitioning: the join reads {named} as they are, by record key"
    ));
    let with_counts: Vec<(&str, usize)> =
        topics.iter().copied().zip(counts.iter().copied()).collect();
    if let Err(e) = assignment::check_counts(&with_counts) {
        report.problems.push(e.to_string());
        return Ok(());
    }
    let mut sampled = Vec::new();
    for (&topic, &count) in topics.iter().zip(&counts) {
        let keys = sample(&consumer, topic, count, per_topic)?;
        let samples: Vec<(Vec<u8>, i32)> = keys.iter().map(|(k, p)| (k.clone(), *p)).collect();
        let fits = partitioner::consistent_partitioners(&samples, counts[0]);
        report.lines.push(format!(
            "{topic}: {} keys sampled, partitioned by {}",
            keys.len(),
            describe(&fits)
        ));
        sampled.push(keys);
    }
    // Every topic against the first: a key must sit in the same partition number in all.
    for (j, r) in sampled.iter().enumerate().skip(1) {
        co_partitioned(topics[0], &sampled[0], topics[j], r, topics.len(), report);
    }
    Ok(())
}

/// Whether the keys sampled in both `left` and `right` sit in the same partition numbers.
fn co_partitioned(
    left: &str,
    l: &std::collections::HashMap<Vec<u8>, i32>,
    right: &str,
    r: &std::collections::HashMap<Vec<u8>, i32>,
    topics: usize,
    report: &mut CheckReport,
) {
    let mismatched = partitioner::mismatched_keys(l, r);
    let (which, every) = match topics {
        2 => ("both topics".to_owned(), "both sides"),
        _ => (format!("both {left} and {right}"), "every topic"),
    };
    if !mismatched.is_empty() {
        let examples: Vec<String> = mismatched
            .iter()
            .take(5)
            .map(|(k, lp, rp)| {
                format!(
                    "{:?} is in {left} partition {lp} but {right} partition {rp}",
                    String::from_utf8_lossy(k)
                )
            })
            .collect();
        report.problems.push(format!(
            "{} of the keys found in {which} sit in different partition numbers, so they can never join \
             ({}). The producers use different partitioners: make librdkafka producers (confluent-kafka, Go, \
             .NET, rdkafka) set partitioner=murmur2_random to match Java's default, then re-produce the data; \
             or set join.repartition = \"always\" ({every} re-keyed by cojoin, at the cost of one more write and read of each)",
            mismatched.len(),
            examples.join("; ")
        ));
    } else {
        let both = l.keys().filter(|k| r.contains_key(*k)).count();
        report.lines.push(format!(
            "{both} keys found in {which}, all in the same partition number"
        ));
    }
}

/// Asks the broker for every permission the config needs: a missing one is a problem naming the
/// grant; those the broker could not tell about are said.
fn permissions_report(
    config: &Config,
    plan: &crate::repartition::Plan,
    report: &mut CheckReport,
) -> Result<()> {
    let needed = crate::acl::required(config, plan);
    let verdicts = match crate::kafka::authz::probe(config, &needed) {
        Ok(v) => v,
        Err(e) => {
            report.lines.push(format!("permissions not checked: {e:#}"));
            return Ok(());
        }
    };
    let principal = crate::acl::principal(config);
    let mut granted = 0;
    for (permission, verdict) in &verdicts {
        match verdict {
            Verdict::Granted => granted += 1,
            Verdict::Missing => report.problems.push(permission.missing_message(&principal)),
            Verdict::Unknown(why) => report
                .lines
                .push(format!("permission {permission}: not checked ({why})")),
        }
    }
    report.lines.push(format!(
        "permissions of {principal}: {granted} of the {} this config needs granted (README \"Security\")",
        verdicts.len()
    ));
    Ok(())
}

/// What repartitioning a side costs and needs: the internal topic, why, and that the side read
/// as it is puts its keys where murmur2 does (as the internal topic does), else nothing joins.
fn repartition_report(
    config: &Config,
    consumer: &BaseConsumer,
    plan: &crate::repartition::Plan,
    counts: &[usize],
    per_topic: usize,
    report: &mut CheckReport,
) -> Result<()> {
    for side in &plan.sides {
        report.lines.push(format!(
            "repartitioning: {} is re-keyed into {} ({} partitions, murmur2) because {}; \
             that costs one more write and read of {} (fix the producers instead to avoid it: README \"Repartitioning\")",
            side.source, side.internal, plan.partitions, side.why, side.source
        ));
    }
    let topics = &config.join.topics;
    // A global table is not the group's to read (`counts` has the stream's alone).
    for i in 0..counts.len() {
        if plan.sides.iter().any(|s| s.source == *topics[i]) {
            continue;
        }
        let keys = sample(consumer, &topics[i], counts[i], per_topic)?;
        let samples: Vec<(Vec<u8>, i32)> = keys.iter().map(|(k, p)| (k.clone(), *p)).collect();
        let fits = partitioner::consistent_partitioners(&samples, counts[i]);
        report.lines.push(format!(
            "{}: {} keys sampled, partitioned by {}",
            topics[i],
            keys.len(),
            describe(&fits)
        ));
        if !fits.is_empty() && !fits.contains(&Partitioner::Murmur2) {
            report.problems.push(format!(
                "{} is read as it is but its keys are not where murmur2 puts them, and the repartitioned side is written with murmur2: keys would sit in different partition numbers and never join. Produce {} with partitioner=murmur2_random (Java's default), or set join.repartition = \"always\" to repartition it too",
                topics[i], topics[i]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_dir(base: &Path) -> CheckReport {
        let mut report = CheckReport::default();
        state_dir_report(base, &mut report);
        report
    }

    #[test]
    fn a_state_dir_that_is_a_file_or_under_one_is_a_problem_naming_it_and_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, "x").unwrap();
        // The file itself, and a missing parent that cannot be created because a file is in
        // the way: both made `cojoin run` stop at start, and check said nothing.
        for base in [file.clone(), file.join("state")] {
            let report = state_dir(&base);
            assert_eq!(report.problems.len(), 1, "{base:?}: {report:?}");
            let problem = &report.problems[0];
            for says in [
                format!("state.dir {base:?}"),
                format!("{file:?} is not a directory"),
                "os error".to_owned(),
                "set state.dir to one".to_owned(),
            ] {
                assert!(problem.contains(&says), "{says:?} missing in: {problem}");
            }
            assert!(report.lines.is_empty(), "{report:?}");
        }
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "x",
            "left as it was"
        );
    }

    #[test]
    fn a_state_dir_this_user_cannot_write_is_a_problem() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("read-only");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o555)).unwrap();
        if std::fs::create_dir(base.join("probe")).is_ok() {
            // Root (or CAP_DAC_OVERRIDE) writes anyway: nothing to find.
            eprintln!("skipped: this user writes into a 0555 directory");
            return;
        }
        let report = state_dir(&base);
        assert_eq!(report.problems.len(), 1, "{report:?}");
        let problem = &report.problems[0];
        assert!(
            problem.contains(&format!("state.dir {base:?}"))
                && problem.contains("Permission denied")
                && problem.contains("can write"),
            "{problem}"
        );
    }

    #[test]
    fn a_usable_state_dir_is_said_and_left_as_it_was_found() {
        let tmp = tempfile::tempdir().unwrap();
        // Missing parents are created, as the host does, and removed again after the try.
        let nested = tmp.path().join("a").join("b").join("state");
        let report = state_dir(&nested);
        assert!(report.problems.is_empty(), "{report:?}");
        assert_eq!(
            report.lines,
            [format!(
                "state.dir {nested:?}: this host's spill directory can be created there (tried as this user)"
            )]
        );
        assert!(!tmp.path().join("a").exists(), "check left what it made");

        // An existing directory keeps what it holds, and holds no spill directory of the try.
        let existing = tmp.path().join("existing");
        std::fs::create_dir(&existing).unwrap();
        std::fs::write(existing.join("keep"), "x").unwrap();
        assert!(state_dir(&existing).problems.is_empty());
        let names: Vec<_> = std::fs::read_dir(&existing)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["keep"]);
    }
}
