//! Where the join state keeps its held events: one task's events packed back to back into large
//! byte segments, each event a fixed header followed by its key, value and headers. Past a budget
//! of resident bytes, the oldest segments move to files on local disk ([`spill`]).
//!
//! Why not one `Arc<Event>` per held event: that costs a 104-byte struct and `Arc` header plus
//! three heap allocations per event, about 200 bytes over key + value (benches/memory.rs). Here an
//! event costs [`HEADER`] bytes over its payload and no allocation of its own.
//!
//! Events mostly leave in the order they arrived (a window closes in event-time order), so a
//! segment empties as a whole and is freed then; one long-held event keeps only its own segment.
//! A [`Handle`] names an event by segment number and byte offset, so handles grow in arrival order.
//!
//! Spilling (off unless [`EventStore::spill_to`] and a budget are set): when the capacity of the
//! segments in RAM passes the budget, the oldest sealed segments are appended to a spill file
//! (about 64 MiB each) and their bytes freed; only where they are, their live count and a summary
//! of the offsets they need stay in RAM. Handles do not change. A spilled event is read and its
//! links are updated in place with small positioned reads and writes (its header, its key, the
//! whole event to hand it out): about six system calls for a match with a spilled partner, served
//! from the kernel's page cache as a rule (benches/spill.rs: a stream where every match has a
//! spilled partner runs about as fast as in RAM). The expiry walk is what reaches nearly every
//! spilled segment, oldest first, just before it empties: it reads the whole segment back in one
//! read, and a segment read back is never spilled again (it would be the next to go out).
//! So the oldest spilled segment being the next to leave, spill files are deleted in order too.
//!
//! - [`record`]: an event's record: the header layout and flags, encoding and decoding.
//! - [`segment`]: a segment of records and what its live events need ([`Needs`]).
//! - [`spill`]: the spill files segments go to past the budget.

mod record;
mod segment;
mod spill;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use record::{
    decode, get_i64, get_u32, record_size, Origins, DEAD, FLAGS, HAS_HEADERS, KEY_LEN, NEXT,
    OFFSET, OUT_OF_ORDER, PARTNER, TIMESTAMP, TOMBSTONE, VALUE_LEN,
};
pub use record::{HEADER, MAX_ORIGINS};
pub use segment::Needs;
use segment::{resident, Segment, Spilled, MAX_SEGMENT, MIN_SEGMENT};
use spill::Spill;
pub use spill::SpillDir;

use crate::event::{Event, Side};

/// An event in the store: `segment number << 32 | byte offset in the segment`.
pub type Handle = u64;

/// The `next` of the last event in a chain.
pub const NO_HANDLE: Handle = u64::MAX;

/// `partner_offset` of an event that has not matched (Kafka offsets are never negative).
pub const UNMATCHED: i64 = -1;

/// Where a store's bytes are, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Capacity of the segments in RAM.
    pub ram_bytes: usize,
    /// Bytes of the spill files still on disk.
    pub disk_bytes: usize,
    /// Bytes ever written to spill files.
    pub spilled_bytes_total: u64,
    /// Bytes ever read back whole from spill files (not counting single events' reads).
    pub read_back_bytes_total: u64,
}

pub struct EventStore {
    /// Segments by number, from `first` on; a segment with no live event has its bytes freed.
    segments: VecDeque<Segment>,
    first: u64,
    /// (topic, partition) pairs the events came from, with the upper bits of their side; a task
    /// has one per side, a replay of a recording keyed from the value one per pair in it (at most
    /// [`MAX_ORIGINS`]).
    origins: Origins,
    /// Capacity of the newest segment, which the next one doubles.
    last_segment: usize,
    /// Sum of the sizes of the live events.
    live_bytes: usize,
    /// Filled bytes of the segments not yet freed, in RAM or on disk: the live events' bytes
    /// and those of removed events that wait for their segment to empty ([`Self::garbage_bytes`]).
    filled: usize,
    /// Sum of the capacities of the segments in RAM.
    resident: usize,
    /// Resident bytes above which sealed segments are spilled.
    budget: usize,
    /// `budget` while the store can spill, else `usize::MAX`: what a push checks.
    spill_above: usize,
    spill: Option<Spill>,
    /// Segments before this one are spilled, freed or read back: the oldest one that may spill.
    spill_from: u64,
}

impl Default for EventStore {
    fn default() -> Self {
        EventStore {
            segments: VecDeque::new(),
            first: 0,
            origins: Origins::default(),
            last_segment: 0,
            live_bytes: 0,
            filled: 0,
            resident: 0,
            budget: usize::MAX,
            spill_above: usize::MAX,
            spill: None,
            spill_from: 0,
        }
    }
}

/// What [`EventStore::push`] stores besides the event.
pub struct Links {
    pub side: Side,
    /// In a two-topic join, the offset of the event's latest partner ([`UNMATCHED`] if none); an
    /// N-way join keeps other marks here (join/state/nway.rs).
    pub partner_offset: i64,
    pub next: Handle,
    /// The event closes before one pushed earlier; see [`EventStore::in_order_from`].
    pub out_of_order: bool,
}

/// An event's fixed fields, read at once: one read from disk for a spilled event.
pub struct Head {
    pub timestamp: i64,
    pub offset: i64,
    pub partner_offset: i64,
    pub next: Handle,
    pub side: Side,
}

impl EventStore {
    /// Spill into `dir` once a budget is set ([`Self::set_budget`]).
    pub fn spill_to(&mut self, dir: Arc<SpillDir>) {
        // Files of an earlier dir stay in use until their segments are released: a store has
        // one dir for good.
        assert!(self.spill.is_none(), "a store spills into one dir");
        self.spill = Some(Spill::new(dir));
        self.spill_above = self.budget;
    }

    /// Resident segment bytes the store keeps itself under by spilling, once it has a spill dir.
    /// Checked on push.
    pub fn set_budget(&mut self, bytes: usize) {
        self.budget = bytes;
        if self.spill.as_ref().is_some_and(|s| !s.failed) {
            self.spill_above = bytes;
        }
    }

    pub fn stats(&self) -> StoreStats {
        let spill = self.spill.as_ref();
        StoreStats {
            ram_bytes: self.resident,
            disk_bytes: spill.map_or(0, |s| s.disk_bytes),
            spilled_bytes_total: spill.map_or(0, |s| s.spilled_total),
            read_back_bytes_total: spill.map_or(0, |s| s.read_back_total),
        }
    }

    /// Copies `event` into the store and returns its handle.
    pub fn push(&mut self, event: &Event, links: Links) -> Handle {
        let headers_len: usize = event
            .headers
            .iter()
            .map(|h| 8 + h.key.len() + h.value.as_ref().map_or(0, Vec::len))
            .sum();
        let value_len = event.value.as_ref().map_or(0, |v| v.len());
        let has_headers = !event.headers.is_empty();
        let size = HEADER
            + event.key_bytes().len()
            + value_len
            + if has_headers { 4 + headers_len } else { 0 };
        let origin = self.origin(&event.topic, event.partition, links.side);
        self.append(size, links.side, event.offset, links.partner_offset, |b| {
            record::encode(b, event, &links, origin, has_headers, headers_len)
        })
    }

    /// Moves the event to the end of the store, with its partner field set to `partner_offset`
    /// and flagged out of order, and returns its new handle; links to it must be updated. What
    /// keeps an event past its close (join/state/nway.rs) moves it, so that it does not keep the
    /// segment the expiry walk read back in RAM: at the end it spills again in its turn.
    pub fn relocate(&mut self, h: Handle, partner_offset: i64) -> Handle {
        let size = self.size(h);
        let (ix, at) = self.split(h);
        let mut r = match resident(&self.segments[ix], at) {
            Some(r) => r[..size].to_vec(),
            None => {
                let mut r = vec![0; size];
                self.read_spilled(&self.segments[ix], at, &mut r);
                r
            }
        };
        r[PARTNER..PARTNER + 8].copy_from_slice(&partner_offset.to_ne_bytes());
        r[FLAGS] |= OUT_OF_ORDER;
        let side = self.origins.side(&r);
        let moved = self.append(size, side, get_i64(&r, OFFSET), partner_offset, |b| {
            b.extend_from_slice(&r)
        });
        self.remove(h);
        moved
    }

    /// Appends a record of `size` bytes, which `write` appends to its segment's bytes, and counts
    /// it: the segment's live events and needs, the live bytes; spills past the budget.
    #[inline]
    fn append(
        &mut self,
        size: usize,
        side: Side,
        offset: i64,
        partner_offset: i64,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Handle {
        let room = self
            .segments
            .back()
            .is_some_and(|s| s.bytes.capacity() - s.bytes.len() >= size);
        if !room {
            self.last_segment = (self.last_segment * 2).clamp(MIN_SEGMENT, MAX_SEGMENT);
            let bytes = Vec::with_capacity(self.last_segment.max(size));
            self.resident += bytes.capacity();
            self.segments.push_back(Segment {
                bytes,
                ..Segment::default()
            });
        }
        let number = self.first + self.segments.len() as u64 - 1;
        let segment = self
            .segments
            .back_mut()
            .expect("a segment was just ensured");
        let at = segment.bytes.len();
        write(&mut segment.bytes);
        segment.live += 1;
        // In place: a `Needs` is 128 bytes, and this runs for every event.
        segment.needs.get_mut().add(side, offset, partner_offset);
        self.live_bytes += size;
        self.filled += size;
        if self.resident > self.spill_above {
            self.spill_oldest();
        }
        (number << 32) | at as u64
    }

    /// Spills the oldest sealed resident segments until the resident bytes are within budget or
    /// only the segment being filled is left.
    #[cold]
    fn spill_oldest(&mut self) {
        let Some(spill) = self.spill.as_mut() else {
            return;
        };
        let filling = self.first + self.segments.len() as u64 - 1;
        self.spill_from = self.spill_from.max(self.first);
        while self.resident > self.budget && self.spill_from < filling {
            let segment = &mut self.segments[(self.spill_from - self.first) as usize];
            if segment.live > 0 {
                // Exact as it goes out: it cannot be recomputed while on disk.
                segment.needs(&self.origins);
                let Some(disk) = spill.write(&segment.bytes) else {
                    self.spill_above = usize::MAX;
                    return;
                };
                self.resident -= segment.bytes.capacity();
                segment.bytes = Vec::new();
                segment.spilled = Some(Spilled { disk });
            }
            self.spill_from += 1;
        }
    }

    /// Brings `h`'s segment back into RAM if it is spilled: the expiry walk is about to empty it.
    pub fn read_back(&mut self, h: Handle) {
        let (ix, _) = self.split(h);
        let segment = &mut self.segments[ix];
        if let Some(spilled) = segment.spilled.take() {
            let spill = self.spill.as_mut().expect("spilled with a spill dir");
            segment.bytes = spill.read_back(&spilled.disk);
            spill.release(&spilled.disk);
            self.resident += segment.bytes.capacity();
            // Back in RAM: its bounds can be made exact again.
            segment.stale.set(true);
        }
    }

    /// Removes the event: its bytes are freed once every event of its segment is removed.
    pub fn remove(&mut self, h: Handle) {
        self.live_bytes -= self.size(h);
        let flags = self.flags(h);
        self.set_field(h, FLAGS, [flags | DEAD]);
        let (ix, _) = self.split(h);
        let filling = ix + 1 == self.segments.len();
        let len = self.segment_len(&self.segments[ix]);
        let segment = &mut self.segments[ix];
        segment.live -= 1;
        segment.stale.set(true);
        if segment.live == 0 {
            self.filled -= len;
            if let Some(spilled) = segment.spilled.take() {
                let spill = self.spill.as_mut().expect("spilled with a spill dir");
                spill.release(&spilled.disk);
            } else if filling {
                // The segment being filled: reuse it from the start.
                segment.bytes.clear();
            } else {
                self.resident -= segment.bytes.capacity();
                segment.bytes = Vec::new();
            }
        }
        while self.segments.len() > 1 && self.segments[0].live == 0 {
            // Freed, unless it was emptied while it was being filled.
            let popped = self.segments.pop_front().expect("more than one segment");
            self.resident -= popped.bytes.capacity();
            self.first += 1;
        }
    }

    pub fn timestamp(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, TIMESTAMP))
    }

    #[cfg(test)]
    pub fn offset(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, OFFSET))
    }

    pub fn partner_offset(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, PARTNER))
    }

    /// Sets the offset of `h`'s latest partner; `head` is what [`Self::head`] read of it (its
    /// side and the partner it replaces, passed in so that a spilled event is not read twice).
    /// Its segment's needs take the new partner; one it replaces is dropped when the segment is
    /// recomputed (in RAM).
    pub fn set_partner_offset(&mut self, h: Handle, head: &Head, offset: i64) {
        self.set_field(h, PARTNER, offset.to_ne_bytes());
        let (ix, _) = self.split(h);
        let segment = &mut self.segments[ix];
        // In place: a `Needs` is 128 bytes, and this runs for every match.
        let needs = segment.needs.get_mut();
        let i = head.side.index();
        needs.partner[i] = needs.partner[i].min(offset);
        if head.partner_offset != UNMATCHED {
            segment.stale.set(true);
        }
    }

    /// Sets the partner field of `h` alone, its segment's needs untouched: for the marks an
    /// N-way join keeps there, which ask for no partner offsets.
    pub fn set_mark(&mut self, h: Handle, mark: i64) {
        self.set_field(h, PARTNER, mark.to_ne_bytes());
    }

    pub fn next(&self, h: Handle) -> Handle {
        u64::from_ne_bytes(self.field(h, NEXT))
    }

    pub fn set_next(&mut self, h: Handle, next: Handle) {
        self.set_field(h, NEXT, next.to_ne_bytes());
    }

    pub fn side(&self, h: Handle) -> Side {
        let r: [u8; FLAGS + 1] = self.field(h, 0);
        self.origins.side(&r)
    }

    /// The fixed fields of `h`, in one read.
    pub fn head(&self, h: Handle) -> Head {
        let r: [u8; HEADER] = self.field(h, 0);
        Head {
            timestamp: get_i64(&r, TIMESTAMP),
            offset: get_i64(&r, OFFSET),
            partner_offset: get_i64(&r, PARTNER),
            next: get_i64(&r, NEXT) as Handle,
            side: self.origins.side(&r),
        }
    }

    /// The event's key: borrowed from RAM, or read from disk for a spilled event.
    pub fn key(&self, h: Handle) -> Cow<'_, [u8]> {
        let (ix, at) = self.split(h);
        let segment = &self.segments[ix];
        match resident(segment, at) {
            Some(r) => Cow::Borrowed(&r[HEADER..HEADER + get_u32(r, KEY_LEN) as usize]),
            None => {
                let mut key = vec![0; u32::from_ne_bytes(self.field(h, KEY_LEN)) as usize];
                self.read_spilled(segment, at + HEADER, &mut key);
                Cow::Owned(key)
            }
        }
    }

    /// Whether the event's key is `key`; for a spilled event, one read of its header and key.
    pub fn key_is(&self, h: Handle, key: &[u8]) -> bool {
        let (ix, at) = self.split(h);
        let segment = &self.segments[ix];
        match resident(segment, at) {
            Some(r) => {
                get_u32(r, KEY_LEN) as usize == key.len() && &r[HEADER..][..key.len()] == key
            }
            None => {
                // The stored key is at least as long as `key` or the record has a value and so
                // goes on; only the end of the segment can cut the read short.
                let len = (HEADER + key.len()).min(self.segment_len(segment) - at);
                let mut r = vec![0; len];
                self.read_spilled(segment, at, &mut r);
                get_u32(&r, KEY_LEN) as usize == key.len() && &r[HEADER..] == key
            }
        }
    }

    /// The event as it was pushed.
    pub fn event(&self, h: Handle) -> Event {
        let (ix, at) = self.split(h);
        let segment = &self.segments[ix];
        match resident(segment, at) {
            Some(r) => decode(&self.origins, r),
            None => {
                let mut r = vec![0; self.size(h)];
                self.read_spilled(segment, at, &mut r);
                decode(&self.origins, &r)
            }
        }
    }

    /// Where the log continues after `h`: pass it to [`Self::in_order_from`], also after `h` is
    /// removed.
    pub fn after(&self, h: Handle) -> Handle {
        h + self.size(h) as u64
    }

    /// The first live event at or after `from` in the log that was not pushed out of order, if
    /// any. Together with the order they were pushed in, this walks the in-order events oldest
    /// first without an index. A spilled segment the walk reaches is read back.
    pub fn in_order_from(&mut self, from: Handle) -> Option<Handle> {
        self.first_from(from, DEAD | OUT_OF_ORDER)
    }

    /// The first live event at or after `from` in the log, in or out of order: the walk that
    /// compacts a table's rows (join/table.rs). A spilled segment the walk reaches is read back.
    pub fn live_from(&mut self, from: Handle) -> Option<Handle> {
        self.first_from(from, DEAD)
    }

    /// The first event at or after `from` in the log with none of the flags `skip`.
    #[inline]
    fn first_from(&mut self, from: Handle, skip: u8) -> Option<Handle> {
        let (mut number, mut at) = match from >> 32 {
            // Its segment was freed and dropped: the log goes on at the oldest one left.
            number if number < self.first => (self.first, 0),
            number => (number, (from & u64::from(u32::MAX)) as usize),
        };
        loop {
            let segment = self.segments.get((number - self.first) as usize)?;
            if segment.spilled.is_some() {
                self.read_back(number << 32);
            }
            let segment = &self.segments[(number - self.first) as usize];
            // A freed segment has no bytes, so this skips it.
            if let Some(r) = resident(segment, at) {
                if r[FLAGS] & skip == 0 {
                    return Some((number << 32) | at as u64);
                }
                at += record_size(r);
            } else {
                number += 1;
                at = 0;
            }
        }
    }

    /// Every live event in RAM, in the order they were pushed.
    #[cfg(test)]
    pub fn live(&self) -> impl Iterator<Item = Handle> + '_ {
        self.segments.iter().enumerate().flat_map(move |(ix, s)| {
            let number = self.first + ix as u64;
            let mut at = 0;
            record::records(&s.bytes).filter_map(move |r| {
                let h = (number << 32) | at as u64;
                at += record_size(r);
                (r[FLAGS] & DEAD == 0).then_some(h)
            })
        })
    }

    /// What the live events of each segment need (see [`Needs`]).
    pub fn needs(&self) -> impl Iterator<Item = Needs> + '_ {
        self.segments
            .iter()
            .filter(|s| s.live > 0)
            .map(|s| s.needs(&self.origins))
    }

    /// Bytes the live events take, headers included.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Bytes removed events still take, in RAM or on disk, because their segment holds live
    /// events too. A window join's events leave about in arrival order and this stays small; a
    /// table's rows do not, and the table moves its oldest rows to keep it down (join/table.rs).
    pub fn garbage_bytes(&self) -> usize {
        self.filled - self.live_bytes
    }

    /// The handle of the first event of the segment being filled (the last one): every event
    /// pushed from now on has a handle at or above it.
    pub fn filling_start(&self) -> Handle {
        (self.first + self.segments.len().saturating_sub(1) as u64) << 32
    }

    /// Whether the event has no value (a Kafka tombstone).
    pub fn is_tombstone(&self, h: Handle) -> bool {
        u32::from_ne_bytes(self.field(h, VALUE_LEN)) == TOMBSTONE
    }

    /// Bytes the event takes in its segment.
    fn size(&self, h: Handle) -> usize {
        let (ix, at) = self.split(h);
        let segment = &self.segments[ix];
        match resident(segment, at) {
            Some(r) => record_size(r),
            None => {
                let mut head = [0; HEADER];
                self.read_spilled(segment, at, &mut head);
                if head[FLAGS] & HAS_HEADERS == 0 {
                    return record_size(&head);
                }
                let value_len = match get_u32(&head, VALUE_LEN) {
                    TOMBSTONE => 0,
                    len => len as usize,
                };
                let headers_at = HEADER + get_u32(&head, KEY_LEN) as usize + value_len;
                let mut len = [0; 4];
                self.read_spilled(segment, at + headers_at, &mut len);
                headers_at + 4 + u32::from_ne_bytes(len) as usize
            }
        }
    }

    fn flags(&self, h: Handle) -> u8 {
        self.field::<1>(h, FLAGS)[0]
    }

    /// (index into `segments`, byte offset in that segment) of `h`.
    fn split(&self, h: Handle) -> (usize, usize) {
        (
            (h >> 32) as usize - self.first as usize,
            (h & u64::from(u32::MAX)) as usize,
        )
    }

    /// `N` bytes from `at` in the event's record: from RAM, or for a spilled event read from disk.
    #[inline]
    fn field<const N: usize>(&self, h: Handle, at: usize) -> [u8; N] {
        let (ix, start) = self.split(h);
        let segment = &self.segments[ix];
        match segment.bytes.get(start + at..start + at + N) {
            Some(b) => b.try_into().expect("slice of length N"),
            None => {
                let mut b = [0; N];
                self.read_spilled(segment, start + at, &mut b);
                b
            }
        }
    }

    fn set_field<const N: usize>(&mut self, h: Handle, at: usize, bytes: [u8; N]) {
        let (ix, start) = self.split(h);
        let start = start + at;
        let segment = &mut self.segments[ix];
        match segment.bytes.get_mut(start..start + N) {
            Some(b) => b.copy_from_slice(&bytes),
            None => self.write_spilled(ix, start, &bytes),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_spilled(&self, segment: &Segment, at: usize, buf: &mut [u8]) {
        let (Some(spilled), Some(spill)) = (&segment.spilled, &self.spill) else {
            unreachable!("an event not in RAM is spilled");
        };
        spill.read(&spilled.disk, at, buf);
    }

    #[cold]
    #[inline(never)]
    fn write_spilled(&self, ix: usize, at: usize, bytes: &[u8]) {
        let (Some(spilled), Some(spill)) = (&self.segments[ix].spilled, &self.spill) else {
            unreachable!("an event not in RAM is spilled");
        };
        spill.write_at(&spilled.disk, at, bytes);
    }

    /// Filled bytes of the segment, in RAM or on disk.
    fn segment_len(&self, segment: &Segment) -> usize {
        segment
            .spilled
            .as_ref()
            .map_or(segment.bytes.len(), |s| s.disk.len)
    }

    #[cfg(test)]
    pub fn is_out_of_order(&self, h: Handle) -> bool {
        self.flags(h) & OUT_OF_ORDER != 0
    }

    #[cfg(test)]
    fn spill_paths(&self) -> Vec<std::path::PathBuf> {
        self.spill.as_ref().map_or_else(Vec::new, Spill::paths)
    }

    /// The index of the event's origin in `origins`, below [`MAX_ORIGINS`].
    fn origin(&mut self, topic: &Arc<str>, partition: i32, side: Side) -> u16 {
        // A live task reads one partition per side; `plugin test`, where the recording decides,
        // checks the limit before and names the line (replay.rs).
        self.origins.index(topic, partition, side).unwrap_or_else(|| {
            panic!("a join state holds events of at most {MAX_ORIGINS} (topic, partition) pairs; {topic:?} partition {partition} is one more")
        })
    }
}

#[cfg(test)]
mod tests;
