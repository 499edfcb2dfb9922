//! Plugin call statistics: [`CallStats`], counted by a worker per call with no lock and no
//! atomic, and [`CallLatency`], the `cojoin_plugin_call_seconds` histogram of one plugin version,
//! which the run loop adds a round's [`CallStats`] to at once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::histogram::{Bounds, Counts, Histogram};
use crate::event::FailureKind;

/// Upper bounds (seconds) of the plugin call latency histogram: 5 µs to 1 s.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The buckets of plugin call latencies ([`LATENCY_BUCKETS`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallBounds;

impl Bounds for CallBounds {
    const UPPER: &'static [f64] = &LATENCY_BUCKETS;
}

/// The latency histogram of one plugin version.
pub type CallLatency = Histogram<CallBounds>;

/// Calls of one plugin version since the run loop last took them: a latency histogram and
/// failures by kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallStats {
    pub latency: Counts<CallBounds>,
    pub failures: BTreeMap<FailureKind, u64>,
    /// Instances replaced because they had grown past their recycling size (not failures).
    pub recycles: u64,
}

impl CallStats {
    pub fn observe(&mut self, took: Duration, failure: Option<FailureKind>) {
        self.latency.observe(took.as_secs_f64());
        if let Some(kind) = failure {
            *self.failures.entry(kind).or_default() += 1;
        }
    }

    /// The latency below which `q` (0..1) of the calls fall, as the bucket's upper bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.latency.quantile(q)
    }
}
