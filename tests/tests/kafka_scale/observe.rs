//! What the scaling tests observe while hosts come and go: each task's longest gap in the
//! outputs (read by `cojoin_e2e::outputs`), who owns each task, and the records the hosts read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cojoin_e2e::broker::ReadRecord;
use cojoin_e2e::hosts::HostProcess;
use cojoin_e2e::http;
use cojoin_e2e::scenario::{order_outputs, PARTITIONS};

/// The owner of each task, from the hosts' latest logged holdings.
pub(crate) fn owners(hosts: &[&HostProcess]) -> BTreeMap<i32, String> {
    let mut owners = BTreeMap::new();
    for h in hosts {
        if let Some((left, right)) = h.assignments().pop() {
            for p in left.iter().filter(|p| right.contains(p)) {
                owners.insert(*p, h.name.clone());
            }
        }
    }
    owners
}

/// The task of an output: order i sits in partition i % 6.
pub(crate) fn task_of(order: &str) -> Option<i32> {
    let i: i32 = order.strip_prefix("order-")?.parse().ok()?;
    Some(i % PARTITIONS)
}

/// The longest time a task went without an output within `[from, to]`, counting from `from` to
/// its first output and from its last to `to`.
pub(crate) fn longest_gap(
    outputs: &[ReadRecord],
    task: i32,
    from: Instant,
    to: Instant,
) -> Duration {
    let mut times: Vec<Instant> = outputs
        .iter()
        .filter(|r| r.arrived >= from && r.arrived <= to)
        .filter(|r| {
            let (order, _) = &order_outputs(std::slice::from_ref(r))[0];
            task_of(order) == Some(task)
        })
        .map(|r| r.arrived)
        .collect();
    times.insert(0, from);
    times.push(to);
    times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Records the hosts read, summed from their /metrics.
pub(crate) fn consumed(hosts: &[&HostProcess]) -> u64 {
    hosts
        .iter()
        .map(|h| {
            let page = http::get(&format!("{}/metrics", h.admin_url(Duration::from_secs(5)))).body;
            ["orders", "payments"]
                .iter()
                .filter_map(|t| {
                    http::sample(
                        &page,
                        &format!("cojoin_records_consumed_total{{topic=\"{t}\"}}"),
                    )
                })
                .sum::<f64>() as u64
        })
        .sum()
}
