//! [`SecondsSince`]: a gauge of the seconds since a moment, computed when it is scraped.
//!
//! `cojoin_repartition_failing_seconds` says how long every batch of the repartition step has
//! failed for. Set by the step itself, it would stand still exactly when the step hangs; kept
//! as the moment it started failing, it goes on rising at each scrape, and `/readyz` and
//! `/healthz` (admin/mod.rs) read the same moment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};

use crate::clock::now_ms;

/// Since when (Unix ms) something has lasted; 0 while it does not. Reads 0 s while it does not.
#[derive(Clone, Debug, Default)]
pub struct SecondsSince(Arc<AtomicU64>);

impl SecondsSince {
    /// It lasts from now, unless it already did.
    pub fn start(&self) {
        let _ = self
            .0
            .compare_exchange(0, now_ms().max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// It is over.
    pub fn stop(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// How long it has lasted, if it does.
    pub fn elapsed(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(now_ms().saturating_sub(since))),
        }
    }
}

impl TypedMetric for SecondsSince {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for SecondsSince {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_gauge(&self.elapsed().map_or(0, |d| d.as_secs()))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
