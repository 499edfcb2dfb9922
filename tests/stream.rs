//! The generated order/payment stream and what a left join of it must produce. Pure: no broker.

use std::collections::{BTreeMap, HashMap};

/// Event time of order 0; order `i` is `i` seconds later, its payment 2 s after it.
pub const BASE_TS: i64 = 1_764_680_400_000;

/// One record to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub topic: &'static str,
    pub key: String,
    pub value: String,
    pub timestamp: i64,
}

/// Orders `from..to`, each followed by its payment unless `i % 4 == 0` (those stay unpaid).
pub fn orders(from: u32, to: u32) -> Vec<Record> {
    let mut out = Vec::new();
    for i in from..to {
        let key = format!("order-{i}");
        let ts = BASE_TS + i64::from(i) * 1000;
        out.push(Record {
            topic: "orders",
            key: key.clone(),
            value: format!("{{\"order_id\":\"{key}\",\"amount\":{}}}", 10 + i % 90),
            timestamp: ts,
        });
        if i % 4 != 0 {
            out.push(Record {
                topic: "payments",
                key: key.clone(),
                value: format!("{{\"order_id\":\"{key}\",\"paid\":true}}"),
                timestamp: ts + 2000,
            });
        }
    }
    out
}

/// The status the order-paid plugin must report for each of orders `0..n`: a payment within
/// the window makes it `paid` (a match); no payment makes it `unpaid` once the window closes
/// (an expiry).
pub fn expected(n: u32) -> BTreeMap<String, &'static str> {
    (0..n)
        .map(|i| {
            let status = if i % 4 == 0 { "unpaid" } else { "paid" };
            (format!("order-{i}"), status)
        })
        .collect()
}

/// A three-topic stream (orders, payments, shipments; issue 32's join): order `i` at `i` s,
/// its payment 2 s later unless `i % 4 == 3`, its shipment 5 s later when `i % 4` is 0, 1 or 3.
pub fn three_topics(from: u32, to: u32) -> Vec<Record> {
    let mut out = Vec::new();
    for i in from..to {
        let key = format!("order-{i}");
        let ts = BASE_TS + i64::from(i) * 1000;
        let mut push = |topic, value: String, at| {
            out.push(Record {
                topic,
                key: key.clone(),
                value,
                timestamp: ts + at,
            })
        };
        push(
            "orders",
            format!("{{\"order_id\":\"{key}\",\"amount\":{}}}", 10 + i % 90),
            0,
        );
        if i % 4 != 3 {
            push(
                "payments",
                format!("{{\"order_id\":\"{key}\",\"paid\":true}}"),
                2000,
            );
        }
        if i % 4 != 2 {
            push("shipments", format!("{{\"order_id\":\"{key}\"}}"), 5000);
        }
    }
    out
}

/// What the order-shipped plugin must report for each of orders `0..n` of [`three_topics`]:
/// `shipped` (a match) with a payment and a shipment, `not-shipped` with a payment only,
/// `unpaid` without one (expiries of a left join).
pub fn expected_three(n: u32) -> BTreeMap<String, &'static str> {
    (0..n)
        .map(|i| {
            let status = match i % 4 {
                2 => "not-shipped",
                3 => "unpaid",
                _ => "shipped",
            };
            (format!("order-{i}"), status)
        })
        .collect()
}

/// What arrived on the output topic, compared with what was expected.
#[derive(Debug, Default)]
pub struct Tally {
    pub outputs: usize,
    pub matches: usize,
    pub expiries: usize,
    /// Outputs beyond the first for an order (the same status again).
    pub duplicates: usize,
    /// The orders reported more than once.
    pub duplicated: Vec<String>,
    /// Expected orders never reported.
    pub missing: Vec<String>,
    /// Orders reported with the wrong status, or not expected at all.
    pub wrong: Vec<String>,
}

impl Tally {
    /// `outputs` are (order id, status) pairs as produced.
    pub fn of(expected: &BTreeMap<String, &'static str>, outputs: &[(String, String)]) -> Tally {
        let mut seen: HashMap<&str, Vec<&str>> = HashMap::new();
        for (order, status) in outputs {
            seen.entry(order).or_default().push(status);
        }
        let mut tally = Tally {
            outputs: outputs.len(),
            ..Tally::default()
        };
        for (order, want) in expected {
            match seen.remove(order.as_str()) {
                None => tally.missing.push(order.clone()),
                Some(got) if got.iter().all(|s| s == want) => {
                    tally.duplicates += got.len() - 1;
                    if got.len() > 1 {
                        tally.duplicated.push(order.clone());
                    }
                    match *want {
                        "paid" | "shipped" => tally.matches += 1,
                        _ => tally.expiries += 1,
                    }
                }
                Some(got) => tally
                    .wrong
                    .push(format!("{order}: {got:?}, expected {want}")),
            }
        }
        for (order, got) in seen {
            tally.wrong.push(format!("{order}: {got:?}, not expected"));
        }
        tally
    }

    /// Every expected outcome present, none wrong (duplicates allowed).
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.wrong.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_pays_three_orders_in_four() {
        let records = orders(0, 8);
        assert_eq!(records.iter().filter(|r| r.topic == "orders").count(), 8);
        assert_eq!(records.iter().filter(|r| r.topic == "payments").count(), 6);
        assert!(!records
            .iter()
            .any(|r| r.topic == "payments" && r.key == "order-4"));
    }

    #[test]
    fn the_tally_counts_duplicates_and_names_missing_and_wrong_outcomes() {
        let want = expected(4);
        let out = |o: &str, s: &str| (o.to_owned(), s.to_owned());
        let outputs = vec![
            out("order-0", "unpaid"),
            out("order-1", "paid"),
            out("order-1", "paid"),
            out("order-2", "unpaid"),
            out("order-9", "paid"),
        ];
        let tally = Tally::of(&want, &outputs);
        assert_eq!((tally.matches, tally.expiries, tally.duplicates), (1, 1, 1));
        assert_eq!(tally.missing, vec!["order-3".to_owned()]);
        assert_eq!(tally.wrong.len(), 2, "{:?}", tally.wrong);
        assert!(!tally.complete());
    }
}
