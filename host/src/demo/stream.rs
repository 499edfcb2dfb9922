//! The demo's generated shop: orders, and payments for most of them — on time, after the window,
//! arriving late, or never. Pure and seeded: the same seed gives the same stream.
//!
//! Event time runs faster than the wall clock ([`EVENT_MS_PER_REAL_MS`]) so that windows close
//! within seconds; `arrival` says when (in event time) a record reaches Kafka, which for a delayed
//! payment is well after its own timestamp. The record type, the clock, the window and the PRNG
//! serve the three-topic shop ([`super::shipments`]) as well.

/// One order every this many event-time milliseconds.
pub const ORDER_EVERY_MS: i64 = 1_000;
/// Event time passes this many times faster than the wall clock.
pub const EVENT_MS_PER_REAL_MS: i64 = 40;
/// The demo's join window and grace, in event time.
pub const WINDOW_MS: i64 = 10_000;
pub const GRACE_MS: i64 = 2_000;

/// The input topics the demo's shops produce to.
pub const ORDERS: &str = "orders";
pub const PAYMENTS: &str = "payments";
pub const SHIPMENTS: &str = "shipments";

/// The key of the `i`th order (and of its payment and shipment).
pub fn order_key(i: usize) -> String {
    format!("order-{i:05}")
}

/// What happens to an order's payment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Paid 1–8 s after the order: a match.
    Paid,
    /// Paid 15–25 s after the order, outside the window: the order expires unpaid.
    PaidTooLate,
    /// Paid on time, but the payment record reaches Kafka 40 s after its timestamp: a late record
    /// (dead-lettered), and the order expires unpaid.
    Delayed,
    /// Never paid: the order expires unpaid.
    Never,
}

impl Fate {
    /// How the summary's `generated` line names it.
    pub fn label(self) -> &'static str {
        match self {
            Fate::Paid => "paid in the window",
            Fate::PaidTooLate => "paid after the window",
            Fate::Delayed => "payment delayed (late record)",
            Fate::Never => "never paid",
        }
    }
}

/// A record to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When it reaches Kafka, in event-time ms from the stream's start.
    pub arrival: i64,
    /// Its topic: [`ORDERS`], [`PAYMENTS`] or [`SHIPMENTS`].
    pub topic: &'static str,
    pub key: String,
    pub value: String,
    /// The record's own timestamp, in event-time ms from the stream's start.
    pub timestamp: i64,
}

/// A small, dependency-free PRNG (xorshift64*): the demo needs variety, not quality.
pub(super) struct Rng(u64);

impl Rng {
    /// Seeded: xorshift needs a non-zero state; 2s+1 keeps every seed distinct.
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(2).wrapping_add(1))
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }

    pub(super) fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

/// The fate of each order: 78 % paid, 8 % paid after the window, 4 % delayed, 10 % never.
fn fate(rng: &mut Rng) -> Fate {
    match rng.below(100) {
        0..=77 => Fate::Paid,
        78..=85 => Fate::PaidTooLate,
        86..=89 => Fate::Delayed,
        _ => Fate::Never,
    }
}

/// Delayed payments only for orders at least this long before the last one: a delayed payment is
/// a late record only if the stream goes on past its arrival.
const NO_DELAY_AT_THE_END_MS: i64 = 60_000;

/// About `events` records (orders and their payments), sorted by arrival, with each order's fate.
pub fn generate(events: usize, seed: u64) -> (Vec<Planned>, Vec<Fate>) {
    let mut rng = Rng::new(seed);
    // Orders with their payment's time, decided first: the end of the stream changes some fates.
    let mut orders = Vec::new();
    let mut records = 0;
    while records < events {
        let i = orders.len();
        let key = order_key(i);
        let ts = i as i64 * ORDER_EVERY_MS;
        let cents = rng.between(500, 25_000);
        let amount = format!("{}.{:02}", cents / 100, cents % 100);
        let customer = rng.below(500);
        let f = fate(&mut rng);
        let pay_ts = match f {
            Fate::Paid | Fate::Delayed => ts + rng.between(1_000, 8_000),
            Fate::PaidTooLate => ts + rng.between(15_000, 25_000),
            Fate::Never => ts,
        };
        records += if f == Fate::Never { 1 } else { 2 };
        orders.push((key, ts, amount, customer, f, pay_ts));
    }
    let last_ts = orders.last().map_or(0, |o| o.1);
    let mut planned = Vec::with_capacity(records);
    let mut fates = Vec::with_capacity(orders.len());
    for (key, ts, amount, customer, mut f, pay_ts) in orders {
        if f == Fate::Delayed && ts > last_ts - NO_DELAY_AT_THE_END_MS {
            f = Fate::Paid;
        }
        planned.push(Planned {
            arrival: ts,
            topic: ORDERS,
            key: key.clone(),
            value: format!(r#"{{"order_id":"{key}","customer":"c-{customer}","amount":{amount}}}"#),
            timestamp: ts,
        });
        if f != Fate::Never {
            planned.push(Planned {
                arrival: if f == Fate::Delayed {
                    pay_ts + 40_000
                } else {
                    pay_ts
                },
                topic: PAYMENTS,
                value: format!(r#"{{"order_id":"{key}","amount":{amount},"method":"card"}}"#),
                key,
                timestamp: pay_ts,
            });
        }
        fates.push(f);
    }
    // Stable: an order and its payment keep their relative order on equal arrival times.
    planned.sort_by_key(|p| p.arrival);
    (planned, fates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_sorted_by_arrival_and_has_every_fate() {
        let (planned, fates) = generate(2_000, 7);
        assert!((2_000..2_002).contains(&planned.len()), "{}", planned.len());
        assert!(planned.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        for f in [Fate::Paid, Fate::PaidTooLate, Fate::Delayed, Fate::Never] {
            assert!(fates.contains(&f), "no {f:?} in {} orders", fates.len());
        }
        let orders = planned.iter().filter(|p| p.topic == ORDERS).count();
        assert_eq!(orders, fates.len());
        let paid = fates.iter().filter(|f| **f == Fate::Paid).count();
        assert!(paid * 100 / orders > 65, "{paid} of {orders} paid");
    }

    #[test]
    fn payments_keep_their_order_s_key_and_amount_and_only_delayed_ones_arrive_late() {
        let (planned, _) = generate(500, 3);
        for p in planned.iter().filter(|p| p.topic == PAYMENTS) {
            let order = planned
                .iter()
                .find(|o| o.topic == ORDERS && o.key == p.key)
                .unwrap();
            let amount = |v: &str| {
                v.split("\"amount\":")
                    .nth(1)
                    .unwrap()
                    .split([',', '}'])
                    .next()
                    .unwrap()
                    .to_owned()
            };
            assert_eq!(amount(&order.value), amount(&p.value));
            let delay = p.arrival - p.timestamp;
            assert!(delay == 0 || delay == 40_000, "{p:?}");
            // A delayed payment arrives after its window and grace have passed, and the stream
            // goes on long enough after it for stream time to have passed them too.
            if delay > 0 {
                assert!(p.arrival > p.timestamp + WINDOW_MS + GRACE_MS);
                let last_order = planned
                    .iter()
                    .filter(|o| o.topic == ORDERS)
                    .map(|o| o.timestamp)
                    .max()
                    .unwrap();
                assert!(p.arrival + WINDOW_MS < last_order, "{p:?}");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        assert_eq!(generate(300, 42), generate(300, 42));
        assert_ne!(generate(300, 42).0, generate(300, 43).0);
    }
}
