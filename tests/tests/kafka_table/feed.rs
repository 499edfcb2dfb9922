//! The script fed to the broker while the hosts run, and the restores the hosts logged.
//!
//! A co-partitioned table is versioned: an order's row is fixed by timestamps, so the rounds are
//! produced back to back. A global table joins an order with the row its host's view holds when
//! the order is processed (latest), which depends on timing unless the feed keeps every host in
//! lockstep with it:
//! - a round's updates are produced, then each running host is waited for until its view has
//!   applied them (on its /metrics, `cojoin_table_updates_total` less
//!   `cojoin_table_restored_records_total`: the records followed since its restore);
//! - then the round's orders, and the wait until the group has processed and committed every
//!   order (so a replay after a kill happens before the next updates and sees the same row);
//! - a host started or restarted restores the whole table before it joins its group: nothing is
//!   produced to the table until it logged its restore, which is checked then (its rows against
//!   the script, the records it read against what compaction left).
//!
//! An order's row is then the last update of its key produced before it
//! ([`Scope::Global`] in `Script::expected`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};

use cojoin_e2e::hosts::HostProcess;
use cojoin_e2e::http;
use cojoin_e2e::scenario::{uncommitted, PARTITIONS};

use super::script::{Scope, Script};
use super::topic::{produce_orders, produce_updates, Table};

pub struct Feed<'a> {
    table: &'a Table,
    script: &'a Script,
    group: &'a str,
    scope: Scope,
    producer: ThreadedProducer<DefaultProducerContext>,
    /// Global tables: how far the hosts' views must be.
    views: Views,
    /// Global tables: every restore a host logged, checked.
    pub restores: Vec<GlobalRestore>,
}

#[derive(Default)]
struct Views {
    /// Table records produced since phase 1.
    produced: usize,
    /// Rounds whose updates were produced.
    rounds: usize,
    /// Per host: `produced` when its current run restored the table.
    restored_at: BTreeMap<String, usize>,
}

/// A global table's restore, as a host logged it (`global table payments restored: N records
/// read, R rows, ...`).
#[derive(Debug)]
pub struct GlobalRestore {
    pub host: String,
    pub records: usize,
    pub rows: usize,
}

impl<'a> Feed<'a> {
    pub fn new(table: &'a Table, script: &'a Script, group: &'a str, scope: Scope) -> Feed<'a> {
        Feed {
            table,
            script,
            group,
            scope,
            producer: table.kafka.producer("murmur2_random"),
            views: Views::default(),
            restores: Vec::new(),
        }
    }

    /// A host (re)started: with a global table, waits until it logged its restore, and checks
    /// it: the rows of every update produced so far, from at most what compaction left of phase
    /// 1 plus phase 2's records (fewer than were produced).
    pub fn host_started(&mut self, host: &HostProcess) {
        if self.scope != Scope::Global {
            return;
        }
        let restore = global_restore(host, Duration::from_secs(60));
        let rows = self.script.rows_after(self.views.rounds) + PARTITIONS as usize;
        assert_eq!(
            restore.rows, rows,
            "{restore:?}: the table after phase 1 and {} rounds has {rows} rows (the roll records included)",
            self.views.rounds
        );
        let most = self.table.compacted.iter().sum::<usize>() + self.views.produced;
        assert!(
            restore.records <= most,
            "{restore:?}: more than the {most} records compaction left"
        );
        eprintln!("{restore:?}, at most {most} records in the compacted table");
        (self.views.restored_at).insert(host.name.clone(), self.views.produced);
        self.restores.push(restore);
    }

    /// Phase 1's orders.
    pub fn phase1(&self) {
        produce_orders(&self.producer, &self.script.phase1_orders);
        self.processed();
    }

    /// Round `r`: its updates, then its orders.
    pub fn round(&mut self, r: usize, hosts: &[HostProcess]) {
        self.updates(r, hosts);
        self.orders(r);
        self.processed();
    }

    /// Round `r`'s updates; with a global table, the wait until every running host of `hosts`
    /// applied them.
    pub fn updates(&mut self, r: usize, hosts: &[HostProcess]) {
        let updates = &self.script.rounds[r].updates;
        produce_updates(&self.producer, updates);
        self.views.produced += updates.len();
        self.views.rounds = r + 1;
        if self.scope == Scope::Global {
            for host in hosts.iter().filter(|h| h.is_started()) {
                self.wait_applied(host);
            }
        }
    }

    pub fn orders(&self, r: usize) {
        produce_orders(&self.producer, &self.script.rounds[r].orders);
    }

    /// With a global table, waits until the group has processed and committed every order.
    pub fn processed(&self) {
        if self.scope != Scope::Global {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let partitions = self.scope.orders_partitions();
            let behind = uncommitted(&self.table.kafka, self.group, "orders", partitions);
            if behind.iter().all(|&n| n == 0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "orders not all processed and committed after 90 s: {behind:?} past the commits"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `host`'s view followed every table record produced since its restore.
    fn wait_applied(&self, host: &HostProcess) {
        let since = (self.views.restored_at.get(&host.name))
            .unwrap_or_else(|| panic!("{} started without Feed::host_started", host.name));
        let want = (self.views.produced - since) as f64;
        let url = format!("{}/metrics", host.admin_url(Duration::from_secs(10)));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = http::get(&url).body;
            let count = |name| http::sample(&page, name).unwrap_or(0.0);
            let followed =
                count("cojoin_table_updates_total") - count("cojoin_table_restored_records_total");
            if followed >= want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} applied {followed} of the {want} table records produced since its restore in 30 s",
                host.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The leading digits of `text`, as a number.
fn leading_number(text: &str) -> usize {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

/// The global table restore `host`'s current run logged, waited for up to `timeout`.
fn global_restore(host: &HostProcess, timeout: Duration) -> GlobalRestore {
    let deadline = Instant::now() + timeout;
    loop {
        let log = std::fs::read_to_string(&host.log).unwrap_or_default();
        let restored = log.lines().find_map(|l| {
            let (_, rest) = l.split_once("global table payments restored: ")?;
            let (_, rows) = rest.split_once(" records read, ")?;
            Some(GlobalRestore {
                host: host.name.clone(),
                records: leading_number(rest),
                rows: leading_number(rows),
            })
        });
        if let Some(restored) = restored {
            return restored;
        }
        assert!(
            Instant::now() < deadline,
            "{} logged no restore of the global table in {timeout:?}:\n{log}",
            host.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The restores of co-partitioned tasks the hosts logged (`task P: table payments-P restored: N
/// records read, ...`): (partition, records read).
pub fn task_restores(hosts: &[HostProcess]) -> Vec<(usize, usize)> {
    hosts
        .iter()
        .flat_map(|h| {
            h.log_text()
                .lines()
                .filter_map(|l| {
                    let (_, rest) = l.split_once("table payments-")?;
                    let (_, read) = rest.split_once(" restored: ")?;
                    Some((leading_number(rest), leading_number(read)))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
