//! The stream of a table join's tests, pure: the table's updates (rows with a version, and
//! deletions) and the orders, in phase 1 (compacted before any host starts) and phase 2 (rounds
//! while the hosts run); the row each order must be joined with; and the outputs judged
//! against it.

use std::collections::BTreeMap;

use cojoin_e2e::broker::ReadRecord;
use cojoin_e2e::scenario::PARTITIONS;

pub const MINUTE: i64 = 60_000;

/// Phase 1's keys `a-0..`; phase 2 updates the first [`PHASE2_A_KEYS`] of them and as many new
/// keys `b-0..`.
const PHASE1_KEYS: usize = 120;
const PHASE2_A_KEYS: usize = 40;
const PHASE2_B_KEYS: usize = 40;
pub const ROUNDS: usize = 8;

/// How the table is joined: which row an order must get, and how the stream is partitioned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scope {
    /// Task p holds partition p of `orders` and of `payments`, versioned: the row as of the
    /// order's timestamp.
    CoPartitioned,
    /// Every host reads the whole table, latest: the row its view holds when the order is
    /// processed, which the feed makes the last update produced before the order.
    Global,
}

impl Scope {
    /// `orders`' partitions: the table's count when co-partitioned; another when global, which
    /// needs no co-partitioning (nor repartitions the stream).
    pub fn orders_partitions(self) -> i32 {
        match self {
            Scope::CoPartitioned => PARTITIONS,
            Scope::Global => 4,
        }
    }
}

/// A table record: a row's new version, or a deletion.
#[derive(Clone, Debug)]
pub struct Update {
    pub key: String,
    pub ts: i64,
    /// `None`: a tombstone.
    pub version: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Order {
    pub n: u32,
    pub key: String,
    pub ts: i64,
}

/// Phase 2's rounds: updates produced first, then orders.
pub struct Round {
    pub updates: Vec<Update>,
    pub orders: Vec<Order>,
}

/// The whole stream, and what each order must be joined with.
pub struct Script {
    pub phase1_updates: Vec<Update>,
    /// Stamped after phase 1's updates: one record per partition that rolls its last segment
    /// (the active one is never cleaned). Keys `roll-P`, which no order has.
    pub roll_ts: i64,
    pub phase1_orders: Vec<Order>,
    pub rounds: Vec<Round>,
}

impl Script {
    /// The stream with event time from `base` (phase 1) to `base` + 23 min (phase 2's last).
    pub fn new(base: i64) -> Script {
        let mut version = 0u32;
        let mut next_version = |deleted: bool| {
            version += 1;
            (!deleted).then_some(version)
        };
        // Phase 1: key j has 1-4 updates a minute apart; every fifth key ends deleted, every
        // sixth (of those with two or more) was deleted first and made again; every tenth has
        // none. Ordered by timestamp, as a live table is written.
        let mut phase1_updates = Vec::new();
        for u in 0..4i64 {
            for j in 0..PHASE1_KEYS {
                let count = 1 + (j % 4) as i64;
                if j % 10 == 9 || u >= count {
                    continue;
                }
                let deleted = (u == count - 1 && j % 5 == 0) || (u == 0 && count > 1 && j % 6 == 1);
                phase1_updates.push(Update {
                    key: format!("a-{j}"),
                    ts: base + u * MINUTE + j as i64 * 100,
                    version: next_version(deleted),
                });
            }
        }
        let mut n = 0u32;
        let mut order = |key: String, ts: i64| {
            n += 1;
            Order { n, key, ts }
        };
        // After every update of phase 1 (8 min, the last update was before 4 min), and for every
        // third key also before any (a minute before the first).
        let mut phase1_orders = Vec::new();
        for j in 0..PHASE1_KEYS {
            phase1_orders.push(order(format!("a-{j}"), base + 8 * MINUTE + j as i64 * 100));
            if j % 3 == 0 {
                phase1_orders.push(order(format!("a-{j}"), base - MINUTE + j as i64));
            }
        }
        // Phase 2, from 20 min: a round every 20 s; two keys in three updated per round, some of
        // them deleted; half the keys ordered 5 s after the round's updates, a fifth 3 s before.
        let keys: Vec<String> = (0..PHASE2_A_KEYS)
            .map(|i| format!("a-{i}"))
            .chain((0..PHASE2_B_KEYS).map(|i| format!("b-{i}")))
            .collect();
        let mut rounds = Vec::new();
        for r in 0..ROUNDS {
            let at = base + 20 * MINUTE + r as i64 * 20_000;
            let mut round = Round {
                updates: Vec::new(),
                orders: Vec::new(),
            };
            for (i, key) in keys.iter().enumerate() {
                let spread = i as i64 * 10;
                if (i + r) % 3 != 0 {
                    round.updates.push(Update {
                        key: key.clone(),
                        ts: at + spread,
                        version: next_version((i + 2 * r) % 11 == 0),
                    });
                }
                if (i + r) % 2 == 0 {
                    round.orders.push(order(key.clone(), at + 5000 + spread));
                }
                if (i + r) % 5 == 0 {
                    round.orders.push(order(key.clone(), at - 3000 + spread));
                }
            }
            rounds.push(round);
        }
        Script {
            phase1_updates,
            roll_ts: base + 6 * MINUTE,
            phase1_orders,
            rounds,
        }
    }

    fn updates(&self) -> impl Iterator<Item = &Update> {
        self.stages().flat_map(|(updates, _)| updates)
    }

    fn orders(&self) -> impl Iterator<Item = &Order> {
        self.stages().flat_map(|(_, orders)| orders)
    }

    /// Phase 1, then each round: updates produced, then orders.
    fn stages(&self) -> impl Iterator<Item = (&[Update], &[Order])> {
        std::iter::once((&self.phase1_updates[..], &self.phase1_orders[..]))
            .chain(self.rounds.iter().map(|r| (&r.updates[..], &r.orders[..])))
    }

    /// Per order number: its key and the version it must be joined with (`None`: unpaid).
    pub fn expected(&self, scope: Scope) -> BTreeMap<u32, (String, Option<u32>)> {
        match scope {
            Scope::CoPartitioned => self.expected_as_of(),
            Scope::Global => self.expected_latest(),
        }
    }

    /// Versioned: its key's update with the largest timestamp at or before the order's.
    fn expected_as_of(&self) -> BTreeMap<u32, (String, Option<u32>)> {
        let mut history: BTreeMap<&str, Vec<&Update>> = BTreeMap::new();
        for u in self.updates() {
            history.entry(&u.key).or_default().push(u);
        }
        self.orders()
            .map(|o| {
                let row = history
                    .get(o.key.as_str())
                    .and_then(|h| h.iter().filter(|u| u.ts <= o.ts).max_by_key(|u| u.ts))
                    .and_then(|u| u.version);
                (o.n, (o.key.clone(), row))
            })
            .collect()
    }

    /// Latest (a global table fed in lockstep, see `feed`): its key's last update produced
    /// before it, whatever the timestamps.
    fn expected_latest(&self) -> BTreeMap<u32, (String, Option<u32>)> {
        let mut rows: BTreeMap<&str, Option<u32>> = BTreeMap::new();
        let mut expected = BTreeMap::new();
        for (updates, orders) in self.stages() {
            rows.extend(updates.iter().map(|u| (u.key.as_str(), u.version)));
            for o in orders {
                let row = rows.get(o.key.as_str()).copied().flatten();
                expected.insert(o.n, (o.key.clone(), row));
            }
        }
        expected
    }

    /// Orders whose key's last update produced before them is a deletion (latest: unpaid).
    pub fn orders_after_a_deletion(&self) -> usize {
        let mut deleted: BTreeMap<&str, bool> = BTreeMap::new();
        let mut orders = 0;
        for (updates, round_orders) in self.stages() {
            deleted.extend(
                updates
                    .iter()
                    .map(|u| (u.key.as_str(), u.version.is_none())),
            );
            orders += (round_orders.iter())
                .filter(|o| deleted.get(o.key.as_str()) == Some(&true))
                .count();
        }
        orders
    }

    /// Keys with a row once phase 1's updates and `rounds` rounds' are applied (the roll
    /// records not counted).
    pub fn rows_after(&self, rounds: usize) -> usize {
        let mut rows: BTreeMap<&str, bool> = BTreeMap::new();
        for (updates, _) in self.stages().take(1 + rounds) {
            rows.extend(
                updates
                    .iter()
                    .map(|u| (u.key.as_str(), u.version.is_some())),
            );
        }
        rows.values().filter(|&&row| row).count()
    }
}

/// What arrived on the output topic, against the reference.
#[derive(Debug, Default)]
pub struct Verdict {
    pub outputs: usize,
    /// Orders answered, by what they should get: a row, or none.
    pub paid: usize,
    pub unpaid: usize,
    /// Outputs beyond the first for an order.
    pub duplicates: usize,
    /// Orders with no output at all.
    pub missing: Vec<u32>,
    /// Outputs with the wrong row (or none), or of no order.
    pub wrong: Vec<String>,
}

impl Verdict {
    pub fn of(expected: &BTreeMap<u32, (String, Option<u32>)>, records: &[ReadRecord]) -> Verdict {
        let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
        let mut verdict = Verdict {
            outputs: records.len(),
            ..Verdict::default()
        };
        for r in records {
            let body: serde_json::Value = serde_json::from_str(&r.value)
                .unwrap_or_else(|e| panic!("output {:?} is not JSON: {e}", r.value));
            let n = body["order"]["n"].as_u64().unwrap_or(0) as u32;
            let version = body["payment"]["v"].as_u64().map(|v| v as u32);
            let got = match body["status"].as_str() {
                Some("paid") if version.is_some() => version,
                Some("unpaid") => None,
                _ => {
                    verdict
                        .wrong
                        .push(format!("not an outcome of the join: {}", r.value));
                    continue;
                }
            };
            let Some((key, want)) = expected.get(&n) else {
                verdict.wrong.push(format!("not an order: {}", r.value));
                continue;
            };
            *seen.entry(n).or_default() += 1;
            if body["order_id"] != key.as_str() || *want != got {
                verdict.wrong.push(format!(
                    "order {n} ({key}): row {got:?}, expected {want:?}: {}",
                    r.value
                ));
            }
        }
        for (n, (_, want)) in expected {
            match seen.get(n) {
                None => verdict.missing.push(*n),
                Some(count) => {
                    verdict.duplicates += count - 1;
                    if want.is_some() {
                        verdict.paid += 1;
                    } else {
                        verdict.unpaid += 1;
                    }
                }
            }
        }
        verdict
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{} outputs: {} orders paid, {} unpaid, {} duplicates, {} missing, {} wrong",
            self.outputs,
            self.paid,
            self.unpaid,
            self.duplicates,
            self.missing.len(),
            self.wrong.len()
        )
    }

    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.wrong.is_empty()
    }
}
