//! Which consumer group protocol a host runs. `kafka.group_protocol = "auto"` takes the new
//! protocol (KIP-848) where the broker enables it — Apache Kafka 4.0 and later list `consumer` in
//! their `group.coordinator.rebalance.protocols` — and the classic one otherwise, and says why.
//! The choice is pure ([`choose`]); asking the broker is [`broker_protocols`].

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

use crate::config::{GroupProtocol, CLASSIC_ONLY_OPTIONS};

use super::timeouts::REQUEST as TIMEOUT;

/// The protocol a host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// KIP-848, the broker's `range` assignor: incremental, sticky, co-partitioned.
    Consumer,
    /// librdkafka's eager `range` assignor.
    Classic,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Consumer => "consumer",
            Protocol::Classic => "classic",
        }
    }
}

/// The protocol for `setting`, and why. `broker` is what the broker enables
/// (`group.coordinator.rebalance.protocols`), or why it could not be read; it is asked only under
/// `auto`.
pub fn choose(
    setting: GroupProtocol,
    options: &BTreeMap<String, String>,
    broker: impl FnOnce() -> Result<String>,
) -> (Protocol, String) {
    match setting {
        GroupProtocol::Consumer => (
            Protocol::Consumer,
            "kafka.group_protocol = \"consumer\"".into(),
        ),
        GroupProtocol::Classic => (
            Protocol::Classic,
            "kafka.group_protocol = \"classic\"".into(),
        ),
        GroupProtocol::Auto => {
            if let Some(set) = CLASSIC_ONLY_OPTIONS
                .iter()
                .find(|o| options.contains_key(**o))
            {
                return (
                    Protocol::Classic,
                    format!("kafka.options sets {set:?}, which only the classic protocol has (remove it to let the broker assign with KIP-848)"),
                );
            }
            match broker() {
                Ok(enabled) if enabled.split(',').any(|p| p.trim() == "consumer") => (
                    Protocol::Consumer,
                    format!("the broker enables it (group.coordinator.rebalance.protocols = {enabled:?})"),
                ),
                Ok(enabled) => (
                    Protocol::Classic,
                    format!("the broker does not enable the consumer protocol (group.coordinator.rebalance.protocols = {enabled:?})"),
                ),
                Err(e) => (
                    Protocol::Classic,
                    format!("the broker's group.coordinator.rebalance.protocols could not be read ({e:#}); set kafka.group_protocol = \"consumer\" to use KIP-848 anyway"),
                ),
            }
        }
    }
}

/// The broker's `group.coordinator.rebalance.protocols` (absent before Apache Kafka 3.7: an
/// error), read with DescribeConfigs from the first broker in the metadata.
pub fn broker_protocols(config: &ClientConfig) -> Result<String> {
    const NAME: &str = "group.coordinator.rebalance.protocols";
    let admin: AdminClient<DefaultClientContext> =
        config.create().context("creating an admin client")?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, TIMEOUT)
        .context("reading the cluster metadata")?;
    let broker = metadata
        .brokers()
        .first()
        .context("the metadata names no broker")?
        .id();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .context("starting a runtime for the admin request")?;
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let results = runtime
        .block_on(admin.describe_configs([&ResourceSpecifier::Broker(broker)], &opts))
        .context("DescribeConfigs")?;
    let resource = results
        .into_iter()
        .next()
        .context("DescribeConfigs answered nothing")?
        .context("DescribeConfigs of the broker")?;
    resource
        .get(NAME)
        .and_then(|e| e.value.clone())
        .with_context(|| format!("the broker has no {NAME} (Apache Kafka before 3.7)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(set: &[&str]) -> BTreeMap<String, String> {
        set.iter().map(|k| (k.to_string(), "1".into())).collect()
    }

    #[test]
    fn auto_takes_the_new_protocol_only_where_the_broker_enables_it() {
        let none = options(&[]);
        let (p, why) = choose(GroupProtocol::Auto, &none, || {
            Ok("classic,consumer,streams".into())
        });
        assert_eq!(p, Protocol::Consumer, "{why}");
        assert!(why.contains("classic,consumer,streams"), "{why}");
        let (p, why) = choose(GroupProtocol::Auto, &none, || Ok("classic".into()));
        assert_eq!(p, Protocol::Classic, "{why}");
        let (p, why) = choose(GroupProtocol::Auto, &none, || {
            anyhow::bail!("UNSUPPORTED_VERSION")
        });
        assert_eq!(p, Protocol::Classic);
        assert!(
            why.contains("UNSUPPORTED_VERSION") && why.contains("group_protocol = \"consumer\""),
            "{why}"
        );
    }

    #[test]
    fn auto_keeps_the_classic_protocol_when_the_options_are_classic_ones_and_asks_nothing() {
        let (p, why) = choose(
            GroupProtocol::Auto,
            &options(&["session.timeout.ms"]),
            || panic!("the broker need not be asked"),
        );
        assert_eq!(p, Protocol::Classic);
        assert!(why.contains("session.timeout.ms"), "{why}");
    }

    #[test]
    fn an_explicit_setting_is_taken_without_asking() {
        let ask = || -> Result<String> { panic!("the broker need not be asked") };
        assert_eq!(
            choose(GroupProtocol::Consumer, &options(&[]), ask).0,
            Protocol::Consumer
        );
        assert_eq!(
            choose(GroupProtocol::Classic, &options(&[]), ask).0,
            Protocol::Classic
        );
    }
}
