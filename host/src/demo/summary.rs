//! What the demo makes of the results it reads: each one's printed line, the counts they add up
//! to, and the closing summary set against what the generator intended. Pure: no Kafka.

use std::collections::HashMap;
use std::fmt;

use super::shop::Shop;
use super::stream::WINDOW_MS;

/// What the demo saw, for its closing lines and for tests.
#[derive(Debug, Default)]
pub struct DemoSummary {
    pub shop: Shop,
    pub events: usize,
    /// Records generated per input topic, in join order.
    pub records: Vec<(&'static str, usize)>,
    pub orders: usize,
    /// Orders matched: paid (two topics), or paid and shipped (three).
    pub matched: usize,
    /// Orders that expired with no payment in their window.
    pub unpaid: usize,
    /// Three topics: how many of the `unpaid` had found a shipment.
    pub unpaid_shipped: usize,
    /// Three topics: orders that expired paid, with no shipment in their window.
    pub not_shipped: usize,
    pub dead_letters: usize,
    /// Orders with no result when the stream ended (their window had not closed), per fate the
    /// generator intended.
    pub open: HashMap<&'static str, usize>,
    /// Wall-clock ms from producing a match's later record to reading its output, sorted.
    pub match_latency_ms: Vec<f64>,
    /// What the generator intended: orders per fate.
    pub fates: HashMap<&'static str, usize>,
}

/// One result of the example plugins (order_paid, order_shipped), as the demo reads it.
#[derive(Debug, PartialEq)]
pub(super) struct Reading {
    pub order_id: String,
    amount: f64,
    status: String,
    /// An expiry's shipments (order_shipped).
    shipments: u64,
}

impl Reading {
    /// The result in an output record's value; `None` if it is not a JSON object.
    pub fn parse(payload: &[u8]) -> Option<Reading> {
        let body: serde_json::Value = serde_json::from_slice(payload).ok()?;
        body.is_object().then(|| Reading {
            order_id: body["order_id"].as_str().unwrap_or("?").to_owned(),
            amount: body["order"]["amount"].as_f64().unwrap_or(0.0),
            status: body["status"].as_str().unwrap_or("?").to_owned(),
            shipments: body["shipments"].as_u64().unwrap_or(0),
        })
    }

    /// Whether it is a match, whose latency the demo measures.
    pub fn is_match(&self) -> bool {
        matches!(self.status.as_str(), "paid" | "shipped")
    }
}

impl DemoSummary {
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let n = self.match_latency_ms.len();
        (n > 0).then(|| self.match_latency_ms[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
    }

    /// Counts `r`, with the latency of a match (`latency_ms`), and returns the line that shows it.
    /// A status the example plugins do not give is not counted.
    pub(super) fn count(&mut self, r: &Reading, latency_ms: Option<f64>) -> String {
        let (id, amount) = (&r.order_id, r.amount);
        let window_s = WINDOW_MS / 1000;
        let three = self.shop == Shop::OrdersPaymentsShipments;
        let since = |record| {
            latency_ms.map_or(String::new(), |ms| {
                format!("{ms:>6.1} ms after the {record}")
            })
        };
        match (r.status.as_str(), three) {
            ("paid", false) => {
                self.matched += 1;
                self.match_latency_ms.extend(latency_ms);
                format!("  paid    {id}  {amount:>8.2}  {}", since("payment"))
            }
            ("unpaid", false) => {
                self.unpaid += 1;
                format!("  UNPAID  {id}  {amount:>8.2}  no payment within {window_s} s")
            }
            ("shipped", true) => {
                self.matched += 1;
                self.match_latency_ms.extend(latency_ms);
                format!("  shipped      {id}  {amount:>8.2}  {}", since("shipment"))
            }
            ("not-shipped", true) => {
                self.not_shipped += 1;
                format!("  NOT SHIPPED  {id}  {amount:>8.2}  paid, no shipment within {window_s} s")
            }
            ("unpaid", true) => {
                self.unpaid += 1;
                let shipped = if r.shipments > 0 {
                    self.unpaid_shipped += 1;
                    " (shipped all the same)"
                } else {
                    ""
                };
                format!(
                    "  UNPAID       {id}  {amount:>8.2}  no payment within {window_s} s{shipped}"
                )
            }
            (other, _) => format!("  {other}  {id}"),
        }
    }

    fn open_count(&self) -> usize {
        self.open.values().sum()
    }
}

/// `n label, n label, …`, sorted by label.
fn per_label(counts: &HashMap<&'static str, usize>) -> String {
    let mut counts: Vec<_> = counts.iter().collect();
    counts.sort();
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    parts.join(", ")
}

impl fmt::Display for DemoSummary {
    /// The closing lines; `generated` is what the generator intended, for the counts above it to
    /// be checked against.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let three = self.shop == Shop::OrdersPaymentsShipments;
        let records: Vec<String> = (self.records.iter())
            .map(|(topic, n)| format!("{n} {topic}"))
            .collect();
        writeln!(f, "== summary")?;
        writeln!(f, "events        {} ({})", self.events, records.join(", "))?;
        if three {
            writeln!(
                f,
                "shipped       {} orders matched with their payment and shipment",
                self.matched
            )?;
            writeln!(
                f,
                "not shipped   {} orders paid, with no shipment in the window",
                self.not_shipped
            )?;
            writeln!(
                f,
                "unpaid        {} orders with no payment in the window ({} of them shipped)",
                self.unpaid, self.unpaid_shipped
            )?;
        } else {
            writeln!(
                f,
                "paid          {} orders matched with their payment",
                self.matched
            )?;
            writeln!(
                f,
                "unpaid        {} orders with no payment in the window",
                self.unpaid
            )?;
        }
        let late = if three {
            "late shipments"
        } else {
            "late payments"
        };
        writeln!(
            f,
            "dead letters  {} records ({late}) in {}",
            self.dead_letters,
            self.shop.dead_letter_topic()
        )?;
        let open = self.open_count();
        write!(
            f,
            "still open    {open} orders whose window had not closed when the stream ended"
        )?;
        // With three topics, by fate: the counts above plus these add up to the generator's.
        if three && open > 0 {
            write!(f, " ({})", per_label(&self.open))?;
        }
        writeln!(f)?;
        let record = if three { "a shipment" } else { "a payment" };
        match (self.latency_quantile(0.5), self.latency_quantile(0.99)) {
            (Some(p50), Some(p99)) => writeln!(
                f,
                "latency       p50 {p50:.1} ms, p99 {p99:.1} ms from producing {record} to reading its match ({} matches)",
                self.match_latency_ms.len()
            )?,
            _ => writeln!(f, "latency       no match measured")?,
        }
        writeln!(f, "generated     {}", per_label(&self.fates))
    }
}

#[cfg(test)]
mod tests;
