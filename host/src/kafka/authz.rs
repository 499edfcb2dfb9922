//! Whether the broker grants this host every permission its config needs ([`crate::acl`]): asked
//! once by `cojoin check` and by `cojoin run` before it joins the group, so a missing ACL is a
//! message naming it and the grant, never a crash loop, a silent hang or a retry storm.
//!
//! How each is asked, without changing anything a running join depends on: topics and groups by
//! their authorized operations (KIP-430, [`super::describe`]); Create on a missing internal topic
//! by a validate-only CreateTopics; DescribeConfigs on the cluster by reading the broker's config;
//! Write on the transactional ids by initialising a producer whose id has the prefix and ends in
//! `-check` (an id no host uses; the broker forgets it after transactional.id.expiration.ms).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::bindings::rd_kafka_AclOperation_t as Op;
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode as Code;

use crate::acl::{Operation, Permission, Resource};
use crate::config::Config;

use super::timeouts::REQUEST as TIMEOUT;

/// What the broker said of one permission.
#[derive(Debug)]
pub enum Verdict {
    Granted,
    Missing,
    /// The broker could not tell (an older broker, a topic that does not exist yet): not a
    /// problem by itself; why.
    Unknown(String),
}

/// Each of `permissions` with the broker's verdict, in the same order.
pub fn probe(config: &Config, permissions: &[Permission]) -> Result<Vec<(Permission, Verdict)>> {
    let base = super::client::base(&config.kafka);
    let admin: AdminClient<DefaultClientContext> =
        base.create().context("creating a Kafka admin client")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("starting a runtime for the admin requests")?;

    // DescribeTopics goes to the controller; a broker that names none in its metadata
    // (librdkafka's mock cluster) would hold the request for its whole timeout.
    admin
        .inner()
        .fetch_metadata(None, TIMEOUT)
        .context("reading the cluster metadata")?;
    // SAFETY: the handle is live for the call (borrowed from `admin`); 0: no wait, the metadata
    // just read says it.
    let controller =
        unsafe { rdkafka::bindings::rd_kafka_controllerid(admin.inner().native_ptr(), 0) };
    if controller < 0 {
        anyhow::bail!("the broker names no controller, so it cannot describe topics");
    }
    let topics: BTreeSet<&str> = permissions
        .iter()
        .filter_map(|p| match &p.resource {
            Resource::Topic(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let topics: Vec<&str> = topics.into_iter().collect();
    let topic_answers = super::describe::topics(&admin, &topics, TIMEOUT)?;
    let groups: BTreeSet<&str> = permissions
        .iter()
        .filter_map(|p| match &p.resource {
            Resource::Group(g) => Some(g.as_str()),
            _ => None,
        })
        .collect();
    let groups: Vec<&str> = groups.into_iter().collect();
    // A broker just started, or a group just moved, answers that its coordinator is not ready:
    // asked again for a few seconds, as the consumer itself would.
    let mut group_answers = super::describe::groups(&admin, &groups, TIMEOUT)?;
    for _ in 0..20 {
        let settling = group_answers.iter().any(|(_, a)| {
            matches!(
                a,
                Err((
                    Code::NotCoordinator
                        | Code::CoordinatorLoadInProgress
                        | Code::CoordinatorNotAvailable,
                    _
                ))
            )
        });
        if !settling {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        group_answers = super::describe::groups(&admin, &groups, TIMEOUT)?;
    }

    let mut out = Vec::new();
    for p in permissions {
        let verdict = match &p.resource {
            Resource::Topic(t) => {
                match topic_answers
                    .iter()
                    .find(|(name, _)| name == t)
                    .map(|a| &a.1)
                {
                    // It exists: nothing to create.
                    Some(Ok(_)) if p.unless_exists => Verdict::Granted,
                    Some(Ok(ops)) => of_operations(ops, p.operation),
                    Some(Err((Code::UnknownTopicOrPartition, _))) if p.unless_exists => {
                        create_verdict(&runtime, &admin, t)
                    }
                    Some(Err((Code::UnknownTopicOrPartition, _))) => {
                        Verdict::Unknown(format!("topic {t} does not exist yet"))
                    }
                    // Without Describe the broker hides even whether the topic exists.
                    Some(Err((Code::TopicAuthorizationFailed, _))) if p.unless_exists => {
                        create_verdict(&runtime, &admin, t)
                    }
                    Some(Err((Code::TopicAuthorizationFailed, _))) => Verdict::Missing,
                    Some(Err((code, why))) => Verdict::Unknown(format!("{code:?}: {why}")),
                    None => Verdict::Unknown(format!("the broker did not describe topic {t}")),
                }
            }
            Resource::Group(g) => {
                match group_answers
                    .iter()
                    .find(|(name, _)| name == g)
                    .map(|a| &a.1)
                {
                    Some(Ok(ops)) => of_operations(ops, p.operation),
                    Some(Err((Code::GroupAuthorizationFailed, _))) => Verdict::Missing,
                    Some(Err((code, why))) => Verdict::Unknown(format!("{code:?}: {why}")),
                    None => Verdict::Unknown(format!("the broker did not describe group {g}")),
                }
            }
            Resource::TransactionalIdPrefix(prefix) => transactions_verdict(config, prefix),
            Resource::Cluster => describe_configs_verdict(&admin),
        };
        out.push((p.clone(), verdict));
    }
    Ok(out)
}

/// Kafka's implications: All grants everything; Read and Write are what we ask for directly.
fn of_operations(ops: &BTreeSet<i32>, operation: Operation) -> Verdict {
    if ops.is_empty() {
        return Verdict::Unknown("the broker did not list authorized operations".into());
    }
    let wanted = match operation {
        Operation::Read => Op::RD_KAFKA_ACL_OPERATION_READ,
        Operation::Write => Op::RD_KAFKA_ACL_OPERATION_WRITE,
        Operation::Create => Op::RD_KAFKA_ACL_OPERATION_CREATE,
        Operation::Delete => Op::RD_KAFKA_ACL_OPERATION_DELETE,
        Operation::DescribeConfigs => Op::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
    };
    if ops.contains(&(wanted as i32)) || ops.contains(&(Op::RD_KAFKA_ACL_OPERATION_ALL as i32)) {
        Verdict::Granted
    } else {
        Verdict::Missing
    }
}

fn create_verdict(
    runtime: &tokio::runtime::Runtime,
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Verdict {
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
    let options = AdminOptions::new()
        .validate_only(true)
        .request_timeout(Some(TIMEOUT));
    match runtime.block_on(admin.create_topics([&new], &options)) {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(_)) => Verdict::Granted,
            Some(Err((_, Code::TopicAuthorizationFailed | Code::ClusterAuthorizationFailed))) => {
                Verdict::Missing
            }
            // It exists after all (made meanwhile), or another refusal that is not about ACLs.
            Some(Err((_, Code::TopicAlreadyExists))) => Verdict::Granted,
            Some(Err((_, code))) => {
                Verdict::Unknown(format!("CreateTopics (validate only): {code:?}"))
            }
            None => Verdict::Unknown("CreateTopics answered nothing".into()),
        },
        Err(e) => Verdict::Unknown(format!("CreateTopics (validate only): {e}")),
    }
}

fn describe_configs_verdict(admin: &AdminClient<DefaultClientContext>) -> Verdict {
    let broker = match admin.inner().fetch_metadata(None, TIMEOUT) {
        Ok(m) => match m.brokers().first() {
            Some(b) => b.id(),
            None => return Verdict::Unknown("the metadata names no broker".into()),
        },
        Err(e) => return Verdict::Unknown(format!("reading the cluster metadata: {e}")),
    };
    match super::describe::broker_configs(admin, broker, TIMEOUT) {
        Ok(Ok(())) => Verdict::Granted,
        Ok(Err((Code::ClusterAuthorizationFailed, _))) => Verdict::Missing,
        Ok(Err((code, why))) => Verdict::Unknown(format!("DescribeConfigs: {code:?}: {why}")),
        Err(e) => Verdict::Unknown(format!("{e:#}")),
    }
}

fn transactions_verdict(config: &Config, prefix: &str) -> Verdict {
    let mut c = super::client::producer(&config.kafka, config.output.compression);
    c.set("transactional.id", format!("{prefix}-check"));
    let producer: BaseProducer = match c.create() {
        Ok(p) => p,
        Err(e) => return Verdict::Unknown(format!("creating a transactional producer: {e}")),
    };
    match producer.init_transactions(TIMEOUT) {
        Ok(()) => Verdict::Granted,
        Err(e) => match e.rdkafka_error_code() {
            Some(Code::TransactionalIdAuthorizationFailed) => Verdict::Missing,
            _ => Verdict::Unknown(format!("initialising a transactional producer: {e}")),
        },
    }
}

/// The missing permissions as one message per line, each naming the grant; `None` when nothing
/// is missing.
pub fn missing_report(principal: &str, verdicts: &[(Permission, Verdict)]) -> Option<String> {
    let lines: Vec<String> = verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Missing))
        .map(|(p, _)| p.missing_message(principal))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// For `cojoin run`: every needed permission the broker denies stops the host with one message
/// naming each and its grant. A broker that cannot be asked (it does not support the requests)
/// is not a reason to stop: the join's own requests will say more.
pub fn require(
    config: &Config,
    plan: &crate::repartition::Plan,
    metrics: &crate::metrics::Metrics,
) -> Result<()> {
    let needed = crate::acl::required(config, plan);
    let verdicts = match probe(config, &needed) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(
                "could not ask the broker which permissions this host has ({e:#}); going on"
            );
            return Ok(());
        }
    };
    if let Some(report) = missing_report(&crate::acl::principal(config), &verdicts) {
        anyhow::bail!("this host lacks Kafka permissions it needs, so it stops before joining the group:\n{report}\n(README \"Security\" lists every permission; `cojoin check` names them too)");
    }
    let unknown: Vec<String> = verdicts
        .iter()
        .filter_map(|(p, v)| match v {
            Verdict::Unknown(why) => Some(format!("{p}: {why}")),
            _ => None,
        })
        .collect();
    let granted = verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Granted))
        .count();
    crate::report::Happened::PermissionsChecked {
        granted,
        unknown: &unknown,
    }
    .emit(metrics);
    Ok(())
}
