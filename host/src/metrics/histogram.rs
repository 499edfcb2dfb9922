//! Histograms fed a round at a time: [`Counts`], gathered by a worker or the run loop with no
//! lock and no atomic, and [`Histogram`], the registered metric over atomics that a round's
//! [`Counts`] are added to at once.
//!
//! Not prometheus-client's `Histogram`: it takes a lock per observation and cannot take a round's
//! bucket counts at once (only one observation at a time), so feeding it per round would mean an
//! observation per call or per output again. The bucket bounds are a type ([`Bounds`]) so that
//! a family can make its histograms with `Default`.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// The upper bounds (seconds, rising) of one kind of histogram's buckets.
pub trait Bounds: std::fmt::Debug + Default + Clone + Send + Sync + 'static {
    const UPPER: &'static [f64];
}

/// Observations since they were last added: a count per bucket of `B::UPPER` (not cumulative),
/// plus one for above the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts<B> {
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
    bounds: PhantomData<B>,
}

impl<B: Bounds> Default for Counts<B> {
    fn default() -> Self {
        Counts {
            buckets: vec![0; B::UPPER.len() + 1],
            count: 0,
            sum_seconds: 0.0,
            bounds: PhantomData,
        }
    }
}

impl<B: Bounds> Counts<B> {
    pub fn observe(&mut self, seconds: f64) {
        let i = B::UPPER
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(B::UPPER.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_seconds += seconds;
    }

    /// The value below which `q` (0..1) of the observations fall, as the bucket's upper bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(B::UPPER.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }
}

/// A registered histogram, shared by the registry and the run loop.
#[derive(Clone, Debug)]
pub struct Histogram<B>(Arc<Shared>, PhantomData<B>);

#[derive(Debug)]
struct Shared {
    /// Per bucket of `B::UPPER`, plus above the last; not cumulative.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations (seconds), as `f64` bits.
    sum_bits: AtomicU64,
}

impl<B: Bounds> Default for Histogram<B> {
    fn default() -> Self {
        let buckets = (0..=B::UPPER.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram(
            Arc::new(Shared {
                buckets,
                sum_bits: AtomicU64::new(0f64.to_bits()),
            }),
            PhantomData,
        )
    }
}

impl<B: Bounds> Histogram<B> {
    /// Adds a round's observations.
    pub fn add(&self, counts: &Counts<B>) {
        for (bucket, n) in self.0.buckets.iter().zip(&counts.buckets) {
            bucket.fetch_add(*n, Ordering::Relaxed);
        }
        let add = |bits: u64| Some((f64::from_bits(bits) + counts.sum_seconds).to_bits());
        let _ = self
            .0
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }

    /// Observations counted: the sum of the buckets, so that it always equals the `+Inf` bucket.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}

impl<B: Bounds> TypedMetric for Histogram<B> {
    const TYPE: MetricType = MetricType::Histogram;
}

impl<B: Bounds> EncodeMetric for Histogram<B> {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        // Per bucket, not cumulative (the encoder sums them); the last, above every bound, is +Inf.
        let buckets: Vec<(f64, u64)> = B::UPPER
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
