//! Plugin call latency: [`CallStats`], counted by a worker per call with no lock and no atomic,
//! and [`CallLatency`], the `cojoin_plugin_call_seconds` histogram of one plugin version, which
//! the run loop adds a round's [`CallStats`] to at once.
//!
//! Not prometheus-client's `Histogram`: it takes a lock per observation and cannot take a round's
//! bucket counts at once (only one observation at a time), so feeding it per round would mean an
//! observation per call again. [`CallLatency`] is its encoding over atomics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

use crate::event::FailureKind;

/// Upper bounds (seconds) of the plugin call latency histogram: 5 µs to 1 s.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Calls of one plugin version since the run loop last took them: a latency histogram and
/// failures by kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallStats {
    /// Count per bucket of `LATENCY_BUCKETS` (not cumulative), plus one for above the last.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    pub count: u64,
    pub sum_seconds: f64,
    pub failures: BTreeMap<FailureKind, u64>,
    /// Instances replaced because they had grown past their recycling size (not failures).
    pub recycles: u64,
}

impl CallStats {
    pub fn observe(&mut self, took: Duration, failure: Option<FailureKind>) {
        let s = took.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_seconds += s;
        if let Some(kind) = failure {
            *self.failures.entry(kind).or_default() += 1;
        }
    }

    /// The latency below which `q` (0..1) of the calls fall, as the bucket's upper bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }
}

/// The latency histogram of one plugin version, shared by the registry and the run loop.
#[derive(Clone, Debug, Default)]
pub struct CallLatency(Arc<Latencies>);

#[derive(Debug, Default)]
struct Latencies {
    /// Per bucket of `LATENCY_BUCKETS`, plus above the last; not cumulative.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// The sum of the latencies (seconds), as `f64` bits.
    sum_bits: AtomicU64,
}

impl CallLatency {
    /// Adds a round's calls.
    pub fn add(&self, stats: &CallStats) {
        for (bucket, n) in self.0.buckets.iter().zip(stats.buckets) {
            bucket.fetch_add(n, Ordering::Relaxed);
        }
        let add = |bits: u64| Some((f64::from_bits(bits) + stats.sum_seconds).to_bits());
        let _ = self
            .0
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }

    /// Calls counted: the sum of the buckets, so that it always equals the `+Inf` bucket.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}

impl TypedMetric for CallLatency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for CallLatency {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        // Per bucket, not cumulative (the encoder sums them); the last, above every bound, is +Inf.
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.0.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = f64::from_bits(self.0.sum_bits.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
