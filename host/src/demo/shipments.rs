//! The three-topic demo's generated shop (`cojoin demo --topics 3`): orders, their payments and
//! their shipments — paid and shipped in the window, or paid and never shipped, shipped after the
//! window, shipped with a record that arrives late, never paid, or shipped but never paid. Pure
//! and seeded, on the two-topic shop's clock and window ([`super::stream`]).
//!
//! Joined as examples/orders-payments-shipments joins them (a `left` join of
//! `[orders, payments, shipments]`), each order has one result, which its fate decides
//! ([`Fate::intended`]): a match, or an expiry with the partners it found.

use super::stream::{order_key, Planned, Rng, GRACE_MS, ORDERS, ORDER_EVERY_MS, PAYMENTS};
use super::stream::{SHIPMENTS, WINDOW_MS};

/// What happens to an order's payment and shipment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Paid 1–4 s after the order, shipped 1–5 s after the payment: a match.
    Shipped,
    /// Paid 1–8 s after the order, never shipped: it expires with its payment.
    NotShipped,
    /// Paid on time, shipped 15–25 s after the order, outside its window: it expires with its
    /// payment and no shipment.
    ShippedLate,
    /// Paid and shipped on time, but the shipment record reaches Kafka 40 s after its timestamp:
    /// a late record (dead-lettered), and the order expires with its payment.
    Delayed,
    /// Never paid nor shipped: it expires alone.
    Unpaid,
    /// Shipped 2–9 s after the order but never paid: it expires with its shipment.
    ShippedUnpaid,
}

/// An order's one result, as the example plugin (plugins/*/order_shipped) reports it: its
/// `status`, and for an expiry how many payments and shipments it found in its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intended {
    pub status: &'static str,
    pub payments: usize,
    pub shipments: usize,
}

impl Fate {
    pub const ALL: [Fate; 6] = [
        Fate::Shipped,
        Fate::NotShipped,
        Fate::ShippedLate,
        Fate::Delayed,
        Fate::Unpaid,
        Fate::ShippedUnpaid,
    ];

    /// How the summary's `generated` line names it (no commas: the line is comma-separated).
    pub fn label(self) -> &'static str {
        match self {
            Fate::Shipped => "paid and shipped in the window",
            Fate::NotShipped => "paid and never shipped",
            Fate::ShippedLate => "shipped after the window",
            Fate::Delayed => "shipment delayed (late record)",
            Fate::Unpaid => "never paid",
            Fate::ShippedUnpaid => "shipped but never paid",
        }
    }

    /// The result the join and the example plugin give an order of this fate.
    pub fn intended(self) -> Intended {
        let (status, payments, shipments) = match self {
            Fate::Shipped => ("shipped", 1, 1),
            Fate::NotShipped | Fate::ShippedLate | Fate::Delayed => ("not-shipped", 1, 0),
            Fate::Unpaid => ("unpaid", 0, 0),
            Fate::ShippedUnpaid => ("unpaid", 0, 1),
        };
        Intended {
            status,
            payments,
            shipments,
        }
    }
}

/// 70 % shipped, 8 % never shipped, 7 % shipped late, 4 % delayed, 7 % unpaid, 4 % shipped unpaid.
fn fate(rng: &mut Rng) -> Fate {
    match rng.below(100) {
        0..=69 => Fate::Shipped,
        70..=77 => Fate::NotShipped,
        78..=84 => Fate::ShippedLate,
        85..=88 => Fate::Delayed,
        89..=95 => Fate::Unpaid,
        _ => Fate::ShippedUnpaid,
    }
}

/// How long after its timestamp a delayed shipment reaches Kafka.
const DELAY_MS: i64 = 40_000;
// Past its window and grace when it arrives, so late whatever else the stream holds.
const _: () = assert!(DELAY_MS > WINDOW_MS + GRACE_MS);
/// Delayed shipments only for orders at least this long before the last one: a delayed shipment
/// is a late record only if the stream goes on past its arrival.
const NO_DELAY_AT_THE_END_MS: i64 = 60_000;

/// One order's records: its payment's and shipment's timestamps, if any.
struct Order {
    ts: i64,
    fate: Fate,
    paid_at: Option<i64>,
    shipped_at: Option<i64>,
}

fn order(i: usize, rng: &mut Rng) -> Order {
    let ts = i as i64 * ORDER_EVERY_MS;
    let fate = fate(rng);
    let on_time_payment = ts + rng.between(1_000, 4_000);
    let (paid_at, shipped_at) = match fate {
        Fate::Shipped | Fate::Delayed => (
            Some(on_time_payment),
            Some(on_time_payment + rng.between(1_000, 5_000)),
        ),
        Fate::NotShipped => (Some(ts + rng.between(1_000, 8_000)), None),
        Fate::ShippedLate => (
            Some(on_time_payment),
            Some(ts + rng.between(15_000, 25_000)),
        ),
        Fate::Unpaid => (None, None),
        Fate::ShippedUnpaid => (None, Some(ts + rng.between(2_000, 9_000))),
    };
    Order {
        ts,
        fate,
        paid_at,
        shipped_at,
    }
}

/// About `events` records (orders, payments and shipments), sorted by arrival, with each order's
/// fate (the `i`th is [`order_key`]`(i)`'s).
pub fn generate(events: usize, seed: u64) -> (Vec<Planned>, Vec<Fate>) {
    let mut rng = Rng::new(seed);
    let mut orders: Vec<(Order, i64, u64)> = Vec::new();
    let mut records = 0;
    while records < events {
        let o = order(orders.len(), &mut rng);
        let cents = rng.between(500, 25_000);
        let customer = rng.below(500);
        records += 1 + usize::from(o.paid_at.is_some()) + usize::from(o.shipped_at.is_some());
        orders.push((o, cents, customer));
    }
    // The end of the stream changes some fates: decided once every order is.
    let last_ts = orders.last().map_or(0, |o| o.0.ts);
    let mut planned = Vec::with_capacity(records);
    let mut fates = Vec::with_capacity(orders.len());
    for (i, (mut o, cents, customer)) in orders.into_iter().enumerate() {
        if o.fate == Fate::Delayed && o.ts > last_ts - NO_DELAY_AT_THE_END_MS {
            o.fate = Fate::Shipped;
        }
        let key = order_key(i);
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let record = |topic, timestamp, arrival, value| Planned {
            arrival,
            topic,
            key: key.clone(),
            value,
            timestamp,
        };
        planned.push(record(
            ORDERS,
            o.ts,
            o.ts,
            format!(r#"{{"order_id":"{key}","customer":"c-{customer}","amount":{amount}}}"#),
        ));
        if let Some(ts) = o.paid_at {
            planned.push(record(
                PAYMENTS,
                ts,
                ts,
                format!(r#"{{"order_id":"{key}","amount":{amount},"method":"card"}}"#),
            ));
        }
        if let Some(ts) = o.shipped_at {
            let carrier = if cents % 2 == 0 { "post" } else { "courier" };
            let arrival = if o.fate == Fate::Delayed {
                ts + DELAY_MS
            } else {
                ts
            };
            planned.push(record(
                SHIPMENTS,
                ts,
                arrival,
                format!(r#"{{"order_id":"{key}","carrier":"{carrier}"}}"#),
            ));
        }
        fates.push(o.fate);
    }
    // Stable: an order's records keep their relative order on equal arrival times.
    planned.sort_by_key(|p| p.arrival);
    (planned, fates)
}

#[cfg(test)]
mod tests;
