//! The demo's two joins (`cojoin demo --topics 2|3`): their topics, the host config they run, the
//! example plugin they take and the stream they generate. Pure: no Kafka.

use super::shipments;
use super::stream::{self, Planned, GRACE_MS, ORDERS, PAYMENTS, SHIPMENTS, WINDOW_MS};
use crate::config::{Config, ConfigError};

/// Which join the demo runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shop {
    /// Orders joined with their payments, as examples/orders-payments.
    #[default]
    OrdersPayments,
    /// Orders joined with their payments and shipments in one task, as
    /// examples/orders-payments-shipments.
    OrdersPaymentsShipments,
}

impl Shop {
    /// The join of `topics` topics, if the demo has one.
    pub fn with_topics(topics: usize) -> Option<Shop> {
        match topics {
            2 => Some(Shop::OrdersPayments),
            3 => Some(Shop::OrdersPaymentsShipments),
            _ => None,
        }
    }

    /// The input topics, in join order.
    pub fn topics(self) -> &'static [&'static str] {
        match self {
            Shop::OrdersPayments => &[ORDERS, PAYMENTS],
            Shop::OrdersPaymentsShipments => &[ORDERS, PAYMENTS, SHIPMENTS],
        }
    }

    pub fn output_topic(self) -> &'static str {
        match self {
            Shop::OrdersPayments => "orders-paid",
            Shop::OrdersPaymentsShipments => "orders-shipped",
        }
    }

    pub fn dead_letter_topic(self) -> &'static str {
        match self {
            Shop::OrdersPayments => "orders-payments-dlq",
            Shop::OrdersPaymentsShipments => "orders-shipped-dlq",
        }
    }

    /// The example plugin's file (`make plugins` builds it into build/plugins/, the wheel installs
    /// both), of world `plugin` or `plugin-n` as the join needs.
    pub fn plugin_file(self) -> &'static str {
        match self {
            Shop::OrdersPayments => "order_paid_python.wasm",
            Shop::OrdersPaymentsShipments => "order_shipped_python.wasm",
        }
    }

    /// About `events` records sorted by arrival, and each order's fate as the summary names it
    /// (the `i`th is [`order_key`](super::stream::order_key)`(i)`'s).
    pub fn generate(self, events: usize, seed: u64) -> (Vec<Planned>, Vec<&'static str>) {
        match self {
            Shop::OrdersPayments => {
                let (planned, fates) = stream::generate(events, seed);
                (
                    planned,
                    fates.into_iter().map(stream::Fate::label).collect(),
                )
            }
            Shop::OrdersPaymentsShipments => {
                let (planned, fates) = shipments::generate(events, seed);
                (
                    planned,
                    fates.into_iter().map(shipments::Fate::label).collect(),
                )
            }
        }
    }

    /// The host's config for the embedded broker: the example's `left` join, in the demo's event
    /// time. The plugin is the one the demo was given, not read from here.
    pub fn config(self, bootstrap: &str) -> Result<Config, ConfigError> {
        let topics = match self {
            Shop::OrdersPayments => format!("left = {ORDERS:?}\nright = {PAYMENTS:?}"),
            Shop::OrdersPaymentsShipments => format!("topics = {:?}", self.topics()),
        };
        let (output, dead_letters) = (self.output_topic(), self.dead_letter_topic());
        Config::parse(&format!(
            r#"
[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "cojoin-demo"
[kafka.options]
# The mock broker answers a fetch only when its wait is over, not when data arrives (as Kafka does).
"fetch.wait.max.ms" = "10"
"linger.ms" = "1"
[join]
{topics}
kind = "left"
window = "{WINDOW_MS}ms"
grace = "{GRACE_MS}ms"
max_idle = "100ms"
late = "dead-letter"
[plugin]
path = "(given on the command line)"
[output]
topic = "{output}"
dead_letter_topic = "{dead_letters}"
"#
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::stream::order_key;

    #[test]
    fn each_join_parses_with_its_topics_and_keys_its_fates_by_order() {
        for shop in [Shop::OrdersPayments, Shop::OrdersPaymentsShipments] {
            let config = shop.config("127.0.0.1:9092").unwrap();
            assert_eq!(config.join.topics, shop.topics(), "{shop:?}");
            assert_eq!(Shop::with_topics(shop.topics().len()), Some(shop));
            let (planned, fates) = shop.generate(200, 1);
            let orders: Vec<_> = planned.iter().filter(|p| p.topic == ORDERS).collect();
            assert_eq!(orders.len(), fates.len());
            for (i, order) in orders.iter().enumerate() {
                assert_eq!(order.key, order_key(i));
            }
        }
        assert_eq!(Shop::with_topics(4), None);
    }
}
