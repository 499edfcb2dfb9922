//! The Kafka permissions (ACLs) a host needs, derived from its config: the least privilege the
//! README's "Security" section lists, in one place that `cojoin check`, `cojoin run` and the
//! tests read. Pure; the broker is asked by `kafka::authz`.
//!
//! | what | resource | operation |
//! |---|---|---|
//! | the join reads its input topics | each input topic | Read |
//! | hosts form one consumer group, commit offsets | group `<group_id>` | Read |
//! | outputs, dead letters, topics plugins may name | `output.topic`, `output.dead_letter_topic`, each `output.allowed_topics` | Write |
//! | exactly-once transactions | transactional id prefix `cojoin-<group_id>` | Write |
//! | `kafka.group_protocol = "auto"` asks which protocols the broker enables | the cluster | DescribeConfigs |
//! | a repartitioned side: the step's group | group `<group_id>-repartition` | Read |
//! | … its internal topic | `<group_id>-<topic>-repartition` | Create (unless pre-created), Write, Read, Delete (DeleteRecords) |

use std::fmt;

use crate::config::{Config, GroupProtocol, Guarantee};
use crate::repartition::Plan;

/// What an ACL is on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    Topic(String),
    Group(String),
    /// Every transactional id starting with this prefix (a PREFIXED resource pattern).
    TransactionalIdPrefix(String),
    Cluster,
}

/// The operations cojoin needs (Kafka's names; Read and Write imply Describe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Read,
    Write,
    Create,
    Delete,
    DescribeConfigs,
}

impl Operation {
    /// As `kafka-acls.sh --operation` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Create => "Create",
            Operation::Delete => "Delete",
            Operation::DescribeConfigs => "DescribeConfigs",
        }
    }
}

/// One permission the host needs, and what for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    pub resource: Resource,
    pub operation: Operation,
    /// Only needed while the resource does not exist (Create on an internal topic).
    pub unless_exists: bool,
    pub why: &'static str,
}

impl Resource {
    /// `topic orders`, `group g`, `transactional ids starting with cojoin-g`, `the cluster`.
    fn describe(&self) -> String {
        match self {
            Resource::Topic(t) => format!("topic {t}"),
            Resource::Group(g) => format!("group {g}"),
            Resource::TransactionalIdPrefix(p) => format!("transactional ids prefixed {p}"),
            Resource::Cluster => "the cluster".to_owned(),
        }
    }

    /// The `kafka-acls.sh` arguments naming the resource.
    fn acl_args(&self) -> String {
        match self {
            Resource::Topic(t) => format!("--topic {t}"),
            Resource::Group(g) => format!("--group {g}"),
            Resource::TransactionalIdPrefix(p) => {
                format!("--transactional-id {p} --resource-pattern-type prefixed")
            }
            Resource::Cluster => "--cluster".to_owned(),
        }
    }
}

impl Permission {
    /// The `kafka-acls.sh` command that grants it to `principal`.
    pub fn grant_command(&self, principal: &str) -> String {
        format!(
            "kafka-acls.sh --bootstrap-server <broker> --command-config <admin.properties> --add --allow-principal {principal} --operation {} {}",
            self.operation.as_str(),
            self.resource.acl_args()
        )
    }

    /// "no Write on topic orders-paid for User:cojoin (outputs): grant it with kafka-acls.sh …"
    pub fn missing_message(&self, principal: &str) -> String {
        format!(
            "no {} on {} for {principal} ({}): grant it with `{}`",
            self.operation.as_str(),
            self.resource.describe(),
            self.why,
            self.grant_command(principal)
        )
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} ({})",
            self.operation.as_str(),
            self.resource.describe(),
            self.why
        )
    }
}

/// The principal the broker sees this host as, as far as the config tells: `User:<sasl.username>`
/// for PLAIN and SCRAM; otherwise (a client certificate, an OAuth token) the broker decides, and
/// the messages say so.
pub fn principal(config: &Config) -> String {
    let options = &config.kafka.options;
    let mechanism = options
        .get("sasl.mechanism")
        .or_else(|| options.get("sasl.mechanisms"))
        .map(|m| m.to_ascii_uppercase());
    match (options.get("sasl.username"), mechanism.as_deref()) {
        (Some(user), Some("PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512")) => format!("User:{user}"),
        _ => "<this host's principal>".to_owned(),
    }
}

/// Every permission the host needs under `config`, with `plan` saying which sides are
/// repartitioned. In a stable order, without repeats.
pub fn required(config: &Config, plan: &Plan) -> Vec<Permission> {
    let group = &config.kafka.group_id;
    let mut out: Vec<Permission> = Vec::new();
    let mut need = |resource: Resource, operation: Operation, why: &'static str| {
        if !out
            .iter()
            .any(|p| p.resource == resource && p.operation == operation)
        {
            out.push(Permission {
                resource,
                operation,
                unless_exists: false,
                why,
            });
        }
    };
    for topic in &config.join.topics {
        need(
            Resource::Topic(topic.clone()),
            Operation::Read,
            "an input of the join",
        );
    }
    need(
        Resource::Group(group.clone()),
        Operation::Read,
        "the join's consumer group: membership and offset commits",
    );
    need(
        Resource::Topic(config.output.topic.clone()),
        Operation::Write,
        "outputs",
    );
    if let Some(dlq) = &config.output.dead_letter_topic {
        need(
            Resource::Topic(dlq.clone()),
            Operation::Write,
            "dead letters",
        );
    }
    for topic in config.output.allowed_topics.iter().flatten() {
        need(
            Resource::Topic(topic.clone()),
            Operation::Write,
            "a topic plugin outputs may name (output.allowed_topics)",
        );
    }
    if config.output.guarantee == Guarantee::ExactlyOnce {
        need(
            Resource::TransactionalIdPrefix(format!("cojoin-{group}")),
            Operation::Write,
            "exactly-once transactions",
        );
    }
    if config.kafka.group_protocol == GroupProtocol::Auto {
        need(
            Resource::Cluster,
            Operation::DescribeConfigs,
            "kafka.group_protocol = \"auto\" reads the broker's group.coordinator.rebalance.protocols",
        );
    }
    if !plan.sides.is_empty() {
        need(
            Resource::Group(format!("{group}-repartition")),
            Operation::Read,
            "the repartition step's consumer group",
        );
    }
    for side in &plan.sides {
        let internal = Resource::Topic(side.internal.clone());
        need(
            internal.clone(),
            Operation::Create,
            "an internal repartition topic, created at start",
        );
        need(
            internal.clone(),
            Operation::Write,
            "the repartition step writes re-keyed records",
        );
        need(
            internal.clone(),
            Operation::Read,
            "the join reads the repartitioned side",
        );
        need(
            internal,
            Operation::Delete,
            "consumed internal records are deleted (DeleteRecords)",
        );
    }
    for p in &mut out {
        p.unless_exists = p.operation == Operation::Create;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        Config::parse(&format!(
            r#"
[kafka]
bootstrap_servers = "b:9092"
group_id = "g"
group_protocol = "consumer"
[kafka.options]
"security.protocol" = "sasl_ssl"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "cojoin"
"sasl.password" = "p"
[join]
left = "orders"
right = "payments"
window = "10s"
[plugin]
path = "p.wasm"
[output]
topic = "orders-paid"
dead_letter_topic = "dlq"
{extra}
"#
        ))
        .unwrap()
    }

    fn plan(config: &Config, counts: [usize; 2]) -> Plan {
        crate::repartition::plan(&config.join, &config.kafka.group_id, &counts)
    }

    fn listed(perms: &[Permission]) -> Vec<String> {
        perms
            .iter()
            .map(|p| format!("{} {:?}", p.operation.as_str(), p.resource))
            .collect()
    }

    #[test]
    fn a_plain_join_needs_read_on_its_inputs_and_group_and_write_on_its_outputs_only() {
        let c = config("");
        let perms = required(&c, &plan(&c, [6, 6]));
        assert_eq!(
            listed(&perms),
            [
                "Read Topic(\"orders\")",
                "Read Topic(\"payments\")",
                "Read Group(\"g\")",
                "Write Topic(\"orders-paid\")",
                "Write Topic(\"dlq\")",
            ]
        );
        assert_eq!(principal(&c), "User:cojoin");
        let missing = perms[3].missing_message(&principal(&c));
        assert!(
            missing.starts_with("no Write on topic orders-paid for User:cojoin (outputs): grant it with `kafka-acls.sh")
                && missing.contains("--allow-principal User:cojoin --operation Write --topic orders-paid"),
            "{missing}"
        );
    }

    #[test]
    fn exactly_once_auto_protocol_and_repartitioning_add_their_own() {
        let mut c = config("guarantee = \"exactly-once\"");
        c.kafka.group_protocol = GroupProtocol::Auto;
        let perms = required(&c, &plan(&c, [6, 3]));
        let l = listed(&perms);
        for expected in [
            "Write TransactionalIdPrefix(\"cojoin-g\")",
            "DescribeConfigs Cluster",
            "Read Group(\"g-repartition\")",
            "Create Topic(\"g-payments-repartition\")",
            "Write Topic(\"g-payments-repartition\")",
            "Read Topic(\"g-payments-repartition\")",
            "Delete Topic(\"g-payments-repartition\")",
        ] {
            assert!(l.contains(&expected.to_owned()), "{expected} not in {l:?}");
        }
        assert!(perms
            .iter()
            .all(|p| p.unless_exists == (p.operation == Operation::Create)));
        let txn = perms
            .iter()
            .find(|p| matches!(p.resource, Resource::TransactionalIdPrefix(_)))
            .unwrap();
        assert!(txn
            .grant_command("User:cojoin")
            .ends_with("--transactional-id cojoin-g --resource-pattern-type prefixed"));
    }

    #[test]
    fn without_a_sasl_username_the_principal_is_the_brokers_to_decide() {
        let mut c = config("");
        c.kafka.options = [("security.protocol", "ssl")].into();
        assert_eq!(principal(&c), "<this host's principal>");
    }
}
