//! One task's table side (issue 33): a topic whose records are upserts by key, a tombstone (no
//! value) deleting the key, held so that each stream record of the task can be joined with the
//! table's row for its key. Pure like the join state: no Kafka, no plugins, no async runtime; the
//! only I/O is the store's spill files past the RAM budget. A task's own table for a
//! co-partitioned table join (task/table.rs); a global table's, shared by a host's tasks
//! ([`SharedTable`]), kept up to date by kafka/global_table.rs.
//!
//! # Semantics
//!
//! Kafka Streams' versioned KTable (KIP-889, KIP-914) and, in `Latest` mode, its plain KTable:
//! - [`TableMode::Versioned`] (the default the config will take): a stream record is joined with
//!   its key's row *as of its timestamp*: the update with the largest timestamp at or below the
//!   record's; a tombstone there, or no such update, is no row. Stream time is the largest
//!   timestamp the state has seen, of updates and lookups alike: the task's stream time, since the
//!   task takes its records in timestamp order across its partitions.
//! - History retention R: a lookup stamped before `stream time − R` answers
//!   [`TableLookup::TooOld`] (the history that would answer it may be gone, and Kafka Streams'
//!   `get(key, asOf)` returns null there). An update stamped before it is dropped
//!   ([`TableUpdate::TooOld`]), as Kafka Streams drops it. Any other update goes into its key's
//!   history in timestamp order, out of order or not; one with the timestamp of a held version
//!   replaces it (the later offset wins, as the topic's compaction would keep it).
//! - [`TableMode::Latest`]: the row is the key's last update by arrival (offset order), whatever
//!   the timestamps; nothing is too old, and a tombstone removes the key at once.
//! - What the join will do with an answer (decided here, done when it is wired): `inner` hands a
//!   stream record with a row to the plugin and counts one with no row; `left` hands every record
//!   over at once, one without a row without a partner. A `TooOld` record is counted apart in both
//!   and, in `left`, handed over without a partner like Kafka Streams' left join does with the
//!   null it gets: it cannot be told from a key without a row. Updates alone call nothing.
//!
//! # Layout
//!
//! A version is the table record itself, an [`Event`] (value or tombstone), in the packed
//! [`EventStore`] the join state uses: the same bytes per row, and the same spilling past the RAM
//! budget (budget 0 keeps only the segment being filled in RAM). A key's versions are chained
//! newest first through the store's `next` links, from a [`Slot`] per key in a hash table that
//! holds 32 bits of the key's hash and never the key (a spilled key is read from disk only on a
//! full hash match). A lookup walks the chain to the first version not newer than the record:
//! nearly always the first.
//!
//! The store frees a segment once all its events are removed, which suits a window's events
//! (they leave about in arrival order) but not rows: a key updated once holds its segment for
//! good. So the table compacts, as a log-structured store does: while the bytes of removed
//! versions exceed those of live ones (plus a slack of a few segments), each update moves the
//! oldest live versions to the end of the store, about twice the bytes it made garbage, and the
//! oldest segments empty and are freed (from disk too: the compaction walk reads a spilled segment
//! back once, as the window's expiry walk does; a spill file, up to 64 MiB, is deleted once all
//! its segments are, so disk use trails by up to a file or two).
//!
//! # Eviction
//!
//! A version ends where its key's next newer version begins. No lookup still allowed (stamped at
//! or after `stream time − R`) can reach a version that ended at or before `stream time − R`, so
//! it is removed, and a key whose newest version is a tombstone stamped at or before then is
//! removed whole: every lookup still allowed would find no row either way, and every update that
//! could land before it is dropped. Each versioned update queues `(its timestamp + R, its key's
//! hash)`: every version's end is some update's timestamp, so when stream time reaches that, the
//! keys with that hash are swept. The reference model (`model.rs`) evicts nothing and has only
//! the `TooOld` rule; the tests check that the two answer alike, so eviction cannot be seen.
//!
//! # Restart
//!
//! The table topic is the table's changelog: on start and whenever a task is assigned, the task
//! reads its table partition from the beginning and upserts every record, calling nothing, up to
//! the end offset it saw when it got the task; only then does it take stream records. The restore
//! needs no committed offset, so none of the table partition's commits holds anything back: the
//! task commits its position there (the next offset to read) only so that the group shows the
//! table's lag, and the stream partitions' commit points are what they are without a table.
//! Two consequences the wiring must state: the stream records a restart replays are looked up in
//! a table restored to its end, so in versioned mode they get the same rows as the first time
//! unless the topic's compaction removed the version they used, or they are older than the
//! restored stream time − R (then `TooOld`); in latest mode they get the newest rows. And the
//! restore goes through [`TableState::upsert`]: bounded by the same RAM budget, spilling alike.
//!
//! Keyless records never reach the table (the task sets them aside, as for the join state).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::state::Slot;
use super::store::{EventStore, Handle, Links, SpillDir, StoreStats, NO_HANDLE, UNMATCHED};
use crate::event::{Event, Side};

pub use shared::{Applied, SharedTable};

#[cfg(test)]
mod model;
mod shared;
#[cfg(test)]
mod tests;

/// Which row a stream record is joined with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableMode {
    /// The row as of the record's timestamp, looking back at most `history_retention_ms` behind
    /// stream time.
    Versioned { history_retention_ms: i64 },
    /// The row the table holds when the record is processed: the key's last update by arrival.
    Latest,
}

/// The table's answer for a stream record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableLookup {
    /// The table record that is the key's row.
    Found(Event),
    /// The key has no row (never had, or deleted) at the record's time.
    NoRow,
    /// Versioned: the record is stamped before `stream time − history retention`, where the
    /// table no longer answers.
    TooOld,
}

/// What became of a table record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableUpdate {
    /// It is in the table: a new version, a replaced one, or a deleted row.
    Applied,
    /// Versioned: stamped before `stream time − history retention`, dropped (to be counted).
    TooOld,
}

/// Removed versions' bytes allowed beyond the live ones' before the table compacts: a few
/// segments, so that the segment being filled and one read back do not set it off alone.
const COMPACT_SLACK: usize = 1 << 20;

/// Bytes an update may move while compacting, beyond twice the garbage it made: the pass goes
/// on even through updates that make none.
const COMPACT_FLOOR: usize = 4 * 1024;

/// Counted per key on top of its versions' bytes: its [`Slot`] and a control byte.
const PER_KEY: usize = std::mem::size_of::<Slot>() + 1;

/// Counted per queued sweep: one entry of `sweeps`.
const PER_SWEEP: usize = std::mem::size_of::<Reverse<(i64, u32)>>();

pub struct TableState {
    mode: TableMode,
    stream_time: Option<i64>,
    /// The versions, packed (see the module doc); each links to the next older of its key.
    store: EventStore,
    /// Per key, its newest version: the head of its chain through the store.
    keys: HashTable<Slot>,
    hasher: foldhash::fast::RandomState,
    /// Versioned: (stream time at which a version may have ended long enough, its key's hash), a
    /// min-heap. Hashes rather than handles: compaction moves versions, and a sweep checks anew.
    sweeps: BinaryHeap<Reverse<(i64, u32)>>,
    /// Versions held, tombstones included.
    versions: usize,
    /// Keys whose newest version has a value.
    rows: usize,
    /// The compaction pass under way: where it goes on, and the start of the segment that was
    /// being filled when it began, where it ends (what it moved lies beyond).
    pass: Option<(Handle, Handle)>,
    /// [`COMPACT_SLACK`], smaller in tests.
    compact_slack: usize,
    /// The newest versions of the keys one sweep looks at; kept to reuse its allocation.
    swept: Vec<Handle>,
}

impl TableState {
    pub fn new(mode: TableMode) -> Self {
        if let TableMode::Versioned {
            history_retention_ms,
        } = mode
        {
            assert!(
                history_retention_ms >= 0,
                "a table's history retention is at least 0 ms, not {history_retention_ms}"
            );
        }
        TableState {
            mode,
            stream_time: None,
            store: EventStore::default(),
            keys: HashTable::new(),
            hasher: Default::default(),
            sweeps: BinaryHeap::new(),
            versions: 0,
            rows: 0,
            pass: None,
            compact_slack: COMPACT_SLACK,
            swept: Vec::new(),
        }
    }

    /// Lets the table move its oldest versions to files in `dir` past its RAM budget
    /// ([`Self::set_ram_budget`]); without it, everything stays in RAM. Once per table.
    pub fn spill_to(&mut self, dir: Arc<SpillDir>) {
        self.store.spill_to(dir);
    }

    /// Bytes of segments the table keeps in RAM once it can spill (`memory.state_bytes`).
    pub fn set_ram_budget(&mut self, bytes: usize) {
        self.store.set_budget(bytes);
    }

    /// Where the versions' bytes are: RAM, disk, and what moved between them so far.
    pub fn store_stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Largest timestamp seen so far, of updates and lookups.
    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// Keys that have a row now (their newest version has a value).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Versions held: rows, their history within retention, and tombstones not yet let go.
    pub fn versions(&self) -> usize {
        self.versions
    }

    /// Bytes the table takes, in RAM or on disk: its versions, removed ones that wait for their
    /// segment to be freed, and its bookkeeping (for /metrics).
    pub fn bytes(&self) -> usize {
        self.store.live_bytes()
            + self.store.garbage_bytes()
            + self.keys.len() * PER_KEY
            + self.sweeps.len() * PER_SWEEP
    }

    /// Takes a table record (a tombstone deletes its key) with its timestamp, partition and
    /// offset, which a row found later carries. Calls nothing: only stream records do.
    pub fn upsert(&mut self, event: &Event) -> TableUpdate {
        let ts = event.timestamp;
        if self.is_too_old(ts) {
            return TableUpdate::TooOld;
        }
        self.observe(ts);
        let garbage = self.store.garbage_bytes();
        match self.mode {
            TableMode::Versioned {
                history_retention_ms,
            } => {
                let hash = self.insert_version(event);
                // With a retention past the end of time nothing ever ends long enough.
                if let Some(at) = ts.checked_add(history_retention_ms) {
                    self.sweeps.push(Reverse((at, hash)));
                }
                self.evict();
            }
            TableMode::Latest => self.replace_row(event),
        }
        self.compact(garbage);
        TableUpdate::Applied
    }

    /// The row a stream record joins with: its key's, as of its timestamp (versioned) or now
    /// (latest). A record newer than any seen moves stream time on.
    pub fn lookup(&mut self, stream_event: &Event) -> TableLookup {
        let ts = stream_event.timestamp;
        if self.is_too_old(ts) {
            return TableLookup::TooOld;
        }
        if self.stream_time.is_none_or(|st| ts > st) {
            self.observe(ts);
            let garbage = self.store.garbage_bytes();
            self.evict();
            self.compact(garbage);
        }
        let key = stream_event.key_bytes();
        let hash = self.hasher.hash_one(key) as u32;
        let found = self.keys.find(Slot::table_hash(hash), |s| {
            s.hash == hash && self.store.key_is(s.handle(), key)
        });
        let Some(slot) = found else {
            return TableLookup::NoRow;
        };
        let latest = self.mode == TableMode::Latest;
        let mut h = slot.handle();
        while h != NO_HANDLE {
            let version = self.store.head(h);
            if latest || version.timestamp <= ts {
                return match self.store.is_tombstone(h) {
                    true => TableLookup::NoRow,
                    false => TableLookup::Found(self.store.event(h)),
                };
            }
            h = version.next;
        }
        TableLookup::NoRow
    }

    /// Versioned: whether a record stamped `ts` is before what the table still answers for.
    fn is_too_old(&self, ts: i64) -> bool {
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

    /// Versioned: puts `event` into its key's history in timestamp order, replacing a version
    /// of the same timestamp. Returns the key's hash.
    fn insert_version(&mut self, event: &Event) -> u32 {
        let Self {
            store,
            keys,
            hasher,
            versions,
            rows,
            ..
        } = self;
        let key = event.key_bytes();
        let hash = hasher.hash_one(key) as u32;
        let ts = event.timestamp;
        let has_value = event.value.is_some();
        let entry = keys.entry(
            Slot::table_hash(hash),
            |s| s.hash == hash && store.key_is(s.handle(), key),
            |s| Slot::table_hash(s.hash),
        );
        let mut entry = match entry {
            Entry::Occupied(o) => o,
            Entry::Vacant(v) => {
                // A tombstone too: an older update arriving later must not become the row.
                v.insert(Slot::new(hash, store.push(event, links(NO_HANDLE))));
                *versions += 1;
                *rows += usize::from(has_value);
                return hash;
            }
        };
        let newest = entry.get().handle();
        // Newest first: the first version not newer than the update is where it goes.
        let (mut newer, mut h) = (NO_HANDLE, newest);
        let mut replaced = false;
        while h != NO_HANDLE {
            let version = store.head(h);
            if version.timestamp <= ts {
                replaced = version.timestamp == ts;
                break;
            }
            newer = h;
            h = version.next;
        }
        let older = if replaced { store.next(h) } else { h };
        let pushed = store.push(event, links(older));
        if newer == NO_HANDLE {
            // The key's newest version, so its row, changes.
            *rows -= usize::from(!store.is_tombstone(newest));
            *rows += usize::from(has_value);
            *entry.get_mut() = Slot::new(hash, pushed);
        } else {
            store.set_next(newer, pushed);
        }
        if replaced {
            store.remove(h);
        } else {
            *versions += 1;
        }
        hash
    }

    /// Latest: makes `event` its key's only version, or removes the key for a tombstone.
    fn replace_row(&mut self, event: &Event) {
        let Self {
            store,
            keys,
            hasher,
            versions,
            rows,
            ..
        } = self;
        let key = event.key_bytes();
        let hash = hasher.hash_one(key) as u32;
        let entry = keys.entry(
            Slot::table_hash(hash),
            |s| s.hash == hash && store.key_is(s.handle(), key),
            |s| Slot::table_hash(s.hash),
        );
        match (entry, event.value.is_some()) {
            (Entry::Vacant(v), true) => {
                v.insert(Slot::new(hash, store.push(event, links(NO_HANDLE))));
                *versions += 1;
                *rows += 1;
            }
            (Entry::Vacant(_), false) => {}
            (Entry::Occupied(mut o), true) => {
                let old = o.get().handle();
                *o.get_mut() = Slot::new(hash, store.push(event, links(NO_HANDLE)));
                store.remove(old);
            }
            (Entry::Occupied(o), false) => {
                let (slot, _) = o.remove();
                store.remove(slot.handle());
                *versions -= 1;
                *rows -= 1;
            }
        }
    }

    /// Versioned: sweeps the keys whose versions may have ended long enough by stream time.
    fn evict(&mut self) {
        let TableMode::Versioned {
            history_retention_ms,
        } = self.mode
        else {
            return;
        };
        let Some(st) = self.stream_time else { return };
        let horizon = st.saturating_sub(history_retention_ms);
        while let Some(&Reverse((at, hash))) = self.sweeps.peek() {
            if at > st {
                break;
            }
            self.sweeps.pop();
            self.sweep(hash, horizon);
        }
    }

    /// Removes, of the keys with `hash`, the versions that ended at or before `horizon`, and
    /// the keys whose newest version is a tombstone stamped at or before it.
    fn sweep(&mut self, hash: u32, horizon: i64) {
        let mut swept = std::mem::take(&mut self.swept);
        swept.clear();
        let slots = self.keys.iter_hash(Slot::table_hash(hash));
        swept.extend(slots.filter(|s| s.hash == hash).map(|s| s.handle()));
        for &newest in &swept {
            let version = self.store.head(newest);
            if version.timestamp <= horizon && self.store.is_tombstone(newest) {
                let found = self
                    .keys
                    .find_entry(Slot::table_hash(hash), |s| s.handle() == newest);
                let Ok(entry) = found else {
                    unreachable!("a swept key is in the table");
                };
                entry.remove();
                self.remove_from(newest);
                continue;
            }
            // `h` is a version that began at `began`; the one after it ended then.
            let (mut h, mut began, mut next) = (newest, version.timestamp, version.next);
            while next != NO_HANDLE {
                if began <= horizon {
                    self.store.set_next(h, NO_HANDLE);
                    self.remove_from(next);
                    break;
                }
                let older = self.store.head(next);
                (h, began, next) = (next, older.timestamp, older.next);
            }
        }
        self.swept = swept;
    }

    /// Removes `h` and every older version after it in its chain.
    fn remove_from(&mut self, mut h: Handle) {
        while h != NO_HANDLE {
            let next = self.store.next(h);
            self.store.remove(h);
            self.versions -= 1;
            h = next;
        }
    }

    /// Moves the oldest live versions to the end of the store while removed ones take more than
    /// live ones (and the slack): about twice the garbage made since `garbage_before`, and at
    /// least [`COMPACT_FLOOR`] bytes (see the module doc).
    fn compact(&mut self, garbage_before: usize) {
        let made = self.store.garbage_bytes().saturating_sub(garbage_before);
        let mut budget = COMPACT_FLOOR + 2 * made;
        while self.store.garbage_bytes() > self.store.live_bytes() + self.compact_slack {
            let (from, end) = *self
                .pass
                .get_or_insert_with(|| (0, self.store.filling_start()));
            let Some(h) = self.store.live_from(from).filter(|&h| h < end) else {
                // The pass is over; a next one starts with the next update, from the oldest.
                self.pass = None;
                return;
            };
            let after = self.store.after(h);
            self.pass = Some((after, end));
            self.relocate(h);
            let moved = (after - h) as usize;
            if budget <= moved {
                return;
            }
            budget -= moved;
        }
    }

    /// Moves version `h` to the end of the store and links its key's chain to where it went.
    fn relocate(&mut self, h: Handle) {
        let Self {
            store,
            keys,
            hasher,
            ..
        } = self;
        let key = store.key(h);
        let hash = hasher.hash_one(&*key) as u32;
        let found = keys.find_entry(Slot::table_hash(hash), |s| {
            s.hash == hash && (s.handle() == h || store.key_is(s.handle(), &key))
        });
        let Ok(mut entry) = found else {
            unreachable!("a held version's key is in the table");
        };
        // An owned key (read from disk) is no longer needed; a borrowed one would hold `store`.
        drop(key);
        let moved = store.relocate(h, UNMATCHED);
        if entry.get().handle() == h {
            *entry.get_mut() = Slot::new(hash, moved);
            return;
        }
        let mut newer = entry.get().handle();
        while store.next(newer) != h {
            newer = store.next(newer);
            assert_ne!(newer, NO_HANDLE, "a held version is in its key's chain");
        }
        store.set_next(newer, moved);
    }
}

/// A version's links: every table record is pushed as the first side, its partner field unused.
fn links(next: Handle) -> Links {
    Links {
        side: Side::LEFT,
        partner_offset: UNMATCHED,
        next,
        out_of_order: false,
    }
}
