//! The table's reference model: per key every version ever applied, in a plain list, answered by
//! brute force. It evicts nothing: it has the `TooOld` rule and nothing else, so a
//! [`super::TableState`] that answers as it does evicts only what no allowed lookup can see.

use std::collections::HashMap;

use super::{TableLookup, TableMode, TableUpdate};
use crate::event::Event;

pub struct TableModel {
    mode: TableMode,
    stream_time: Option<i64>,
    /// Per key, its versions (tombstones too), at most one per timestamp, in no order.
    keys: HashMap<Box<[u8]>, Vec<Event>>,
}

impl TableModel {
    pub fn new(mode: TableMode) -> Self {
        TableModel {
            mode,
            stream_time: None,
            keys: HashMap::new(),
        }
    }

    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    fn too_old(&self, ts: i64) -> bool {
        match self.mode {
            TableMode::Versioned {
                history_retention_ms,
            } => self
                .stream_time
                .is_some_and(|st| ts < st.saturating_sub(history_retention_ms)),
            TableMode::Latest => false,
        }
    }

    fn observe(&mut self, ts: i64) {
        self.stream_time = Some(self.stream_time.map_or(ts, |st| st.max(ts)));
    }

    pub fn upsert(&mut self, event: &Event) -> TableUpdate {
        if self.too_old(event.timestamp) {
            return TableUpdate::TooOld;
        }
        self.observe(event.timestamp);
        let versions = self.keys.entry(event.key_bytes().into()).or_default();
        match self.mode {
            TableMode::Latest => versions.clear(),
            TableMode::Versioned { .. } => versions.retain(|v| v.timestamp != event.timestamp),
        }
        versions.push(event.clone());
        TableUpdate::Applied
    }

    pub fn lookup(&mut self, stream_event: &Event) -> TableLookup {
        let ts = stream_event.timestamp;
        if self.too_old(ts) {
            return TableLookup::TooOld;
        }
        self.observe(ts);
        let versions = self.keys.get(stream_event.key_bytes());
        let row = match self.mode {
            TableMode::Latest => versions.and_then(|v| v.last()),
            TableMode::Versioned { .. } => versions.and_then(|v| {
                v.iter()
                    .filter(|v| v.timestamp <= ts)
                    .max_by_key(|v| v.timestamp)
            }),
        };
        match row {
            Some(row) if row.value.is_some() => TableLookup::Found(row.clone()),
            _ => TableLookup::NoRow,
        }
    }

    /// Keys whose newest version has a value.
    pub fn rows(&self) -> usize {
        let newest = |v: &Vec<Event>| match self.mode {
            TableMode::Latest => v.last().cloned(),
            TableMode::Versioned { .. } => v.iter().max_by_key(|e| e.timestamp).cloned(),
        };
        (self.keys.values())
            .filter(|v| newest(v).is_some_and(|e| e.value.is_some()))
            .count()
    }
}
