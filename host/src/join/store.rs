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

mod spill;

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

pub use spill::SpillDir;
use spill::{Disk, Spill};

use crate::event::{Event, Header, Side};

/// An event in the store: `segment number << 32 | byte offset in the segment`.
pub type Handle = u64;

/// The `next` of the last event in a chain.
pub const NO_HANDLE: Handle = u64::MAX;

/// `partner_offset` of an event that has not matched (Kafka offsets are never negative).
pub const UNMATCHED: i64 = -1;

/// Segment sizes double from the smallest to the largest, so an idle task holds little and a busy
/// one wastes at most the tail of a large segment per segment. An event larger than the largest
/// gets a segment of its own size.
const MIN_SEGMENT: usize = 4 * 1024;
const MAX_SEGMENT: usize = 256 * 1024;

// Header layout, native-endian, unaligned (read with `from_ne_bytes`, never cast):
const TIMESTAMP: usize = 0; // i64
const OFFSET: usize = 8; // i64
const PARTNER: usize = 16; // i64, mutable
const NEXT: usize = 24; // Handle, mutable
const KEY_LEN: usize = 32; // u32
const VALUE_LEN: usize = 36; // u32, TOMBSTONE for no value
const ORIGIN: usize = 40; // u8, the low 8 bits of the index into `origins`
const FLAGS: usize = 41; // u8: RIGHT, HAS_HEADERS, OUT_OF_ORDER, DEAD; top 4: origin bits 8-11
/// Bytes before an event's key.
pub const HEADER: usize = 42;

const RIGHT: u8 = 1;
/// The value is followed by a u32 length and the encoded headers; most events have none.
const HAS_HEADERS: u8 = 2;
/// Not in the log's close-time order: the state keeps it in its expiry heap instead.
const OUT_OF_ORDER: u8 = 4;
/// Removed; its bytes stay until its segment is freed.
const DEAD: u8 = 8;

const TOMBSTONE: u32 = u32::MAX;

/// The index into `origins` is 12 bits: its [`ORIGIN`] byte and the 4 bits the flags leave free.
/// The header is packed, with no padding to grow into: a wider field would cost every held event
/// a byte. A live task holds two (topic, partition) pairs; only `plugin test` with a key from the
/// value sends a whole recording to one task, and 256 pairs were too few there.
const ORIGIN_FLAG_SHIFT: u32 = 4;

/// (topic, partition) pairs one store, one task's join state, can hold events of.
pub const MAX_ORIGINS: usize = 1 << (8 + ORIGIN_FLAG_SHIFT);

struct Segment {
    /// Empty while spilled, and once every event in it was removed.
    bytes: Vec<u8>,
    /// Events in this segment not yet removed.
    live: u32,
    spilled: Option<Spilled>,
    /// What the segment's live events need ([`Needs`]), so that commit points cost a look per
    /// segment, not per held event (a task holding 480,000 events spent most of its time
    /// scanning them for every round's commit points). Kept exact for a segment in RAM:
    /// recomputed from its records (`stale`) after an event leaves or changes partner.
    needs: Cell<Needs>,
    stale: Cell<bool>,
}

impl Default for Segment {
    fn default() -> Self {
        Segment {
            bytes: Vec::new(),
            live: 0,
            spilled: None,
            needs: Cell::new(Needs::NONE),
            stale: Cell::new(false),
        }
    }
}

impl Segment {
    /// The segment's needs, recomputed first if an event left or changed partner. A spilled
    /// segment's are not recomputed (that would read the disk): they stay lower bounds until it
    /// is read back.
    fn needs(&self) -> Needs {
        if self.stale.get() && self.spilled.is_none() {
            let mut needs = Needs::NONE;
            for r in records(&self.bytes) {
                if r[FLAGS] & DEAD == 0 {
                    needs.add(
                        flags_side(r[FLAGS]),
                        get_i64(r, OFFSET),
                        get_i64(r, PARTNER),
                    );
                }
            }
            self.needs.set(needs);
            self.stale.set(false);
        }
        self.needs.get()
    }
}

struct Spilled {
    disk: Disk,
}

/// The smallest offsets a segment's live events need, per side: kept in RAM so that a commit
/// (every second or faster) neither scans every held event nor reads the disk. Exact for a segment
/// in RAM; for a spilled one, taken when it is spilled and only lowered after (an event leaving
/// leaves a bound lower than needed, which holds a commit back until the segment is read back to
/// expire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// By side, the smallest offset of a live event of that side; `i64::MAX` for none.
    own: [i64; 2],
    /// By side, the smallest partner offset (of the other side) of a matched live event of that
    /// side; `i64::MAX` for none.
    partner: [i64; 2],
}

impl Needs {
    const NONE: Needs = Needs {
        own: [i64::MAX; 2],
        partner: [i64::MAX; 2],
    };

    /// (side, offset) pairs, as [`EventStore::live`]'s events give them: each side's own smallest
    /// offset, and, of the sides `partner_needed` names, the smallest partner offset.
    pub fn offsets(
        &self,
        partner_needed: impl Fn(Side) -> bool,
    ) -> impl Iterator<Item = (Side, i64)> {
        let [own, partner] = [self.own, self.partner];
        [Side::Left, Side::Right].into_iter().flat_map(move |side| {
            let i = side.index();
            let own = (own[i] != i64::MAX).then_some((side, own[i]));
            let partner = (partner[i] != i64::MAX && partner_needed(side))
                .then_some((side.opposite(), partner[i]));
            own.into_iter().chain(partner)
        })
    }

    fn add(&mut self, side: Side, offset: i64, partner_offset: i64) {
        let i = side.index();
        self.own[i] = self.own[i].min(offset);
        if partner_offset != UNMATCHED {
            self.partner[i] = self.partner[i].min(partner_offset);
        }
    }
}

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
    /// (topic, partition) pairs the events came from; a task has one per side, a replay of a
    /// recording keyed from the value one per pair in it (at most [`MAX_ORIGINS`]).
    origins: Vec<(Arc<str>, i32)>,
    /// Capacity of the newest segment, which the next one doubles.
    last_segment: usize,
    /// Sum of the sizes of the live events.
    live_bytes: usize,
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
            origins: Vec::new(),
            last_segment: 0,
            live_bytes: 0,
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
        let origin = self.origin(&event.topic, event.partition);

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
        let b = &mut segment.bytes;
        b.extend_from_slice(&event.timestamp.to_ne_bytes());
        b.extend_from_slice(&event.offset.to_ne_bytes());
        b.extend_from_slice(&links.partner_offset.to_ne_bytes());
        b.extend_from_slice(&links.next.to_ne_bytes());
        b.extend_from_slice(&len32(event.key_bytes().len()).to_ne_bytes());
        let value_field = event.value.as_ref().map_or(TOMBSTONE, |v| len32(v.len()));
        b.extend_from_slice(&value_field.to_ne_bytes());
        let [origin_low, origin_high] = origin.to_le_bytes();
        b.push(origin_low);
        let side = if links.side == Side::Right { RIGHT } else { 0 };
        let out_of_order = if links.out_of_order { OUT_OF_ORDER } else { 0 };
        let has_headers_flag = if has_headers { HAS_HEADERS } else { 0 };
        b.push(side | out_of_order | has_headers_flag | (origin_high << ORIGIN_FLAG_SHIFT));
        b.extend_from_slice(event.key_bytes());
        if let Some(value) = &event.value {
            b.extend_from_slice(value);
        }
        if has_headers {
            b.extend_from_slice(&len32(headers_len).to_ne_bytes());
        }
        for h in event.headers.iter() {
            b.extend_from_slice(&len32(h.key.len()).to_ne_bytes());
            b.extend_from_slice(h.key.as_bytes());
            match &h.value {
                Some(v) => {
                    b.extend_from_slice(&len32(v.len()).to_ne_bytes());
                    b.extend_from_slice(v);
                }
                None => b.extend_from_slice(&TOMBSTONE.to_ne_bytes()),
            }
        }
        segment.live += 1;
        let mut needs = segment.needs.get();
        needs.add(links.side, event.offset, links.partner_offset);
        segment.needs.set(needs);
        self.live_bytes += size;
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
                segment.needs();
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
        let segment = &mut self.segments[ix];
        segment.live -= 1;
        segment.stale.set(true);
        if segment.live == 0 {
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
        let segment = &self.segments[ix];
        let mut needs = segment.needs.get();
        let i = head.side.index();
        needs.partner[i] = needs.partner[i].min(offset);
        segment.needs.set(needs);
        if head.partner_offset != UNMATCHED {
            segment.stale.set(true);
        }
    }

    pub fn next(&self, h: Handle) -> Handle {
        u64::from_ne_bytes(self.field(h, NEXT))
    }

    pub fn set_next(&mut self, h: Handle, next: Handle) {
        self.set_field(h, NEXT, next.to_ne_bytes());
    }

    pub fn side(&self, h: Handle) -> Side {
        flags_side(self.flags(h))
    }

    /// The fixed fields of `h`, in one read.
    pub fn head(&self, h: Handle) -> Head {
        let r: [u8; HEADER] = self.field(h, 0);
        Head {
            timestamp: get_i64(&r, TIMESTAMP),
            offset: get_i64(&r, OFFSET),
            partner_offset: get_i64(&r, PARTNER),
            next: get_i64(&r, NEXT) as Handle,
            side: flags_side(r[FLAGS]),
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
                if r[FLAGS] & (DEAD | OUT_OF_ORDER) == 0 {
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
            records(&s.bytes).filter_map(move |r| {
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
            .map(Segment::needs)
    }

    /// Bytes the live events take, headers included.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
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

    /// The index of the event's (topic, partition) in `origins`, below [`MAX_ORIGINS`].
    fn origin(&mut self, topic: &Arc<str>, partition: i32) -> u16 {
        let found = self
            .origins
            .iter()
            .position(|(t, p)| *p == partition && (Arc::ptr_eq(t, topic) || **t == **topic));
        let ix = found.unwrap_or_else(|| {
            // A live task reads two partitions; `plugin test`, where the recording decides,
            // checks the limit before and names the line (replay.rs).
            assert!(
                self.origins.len() < MAX_ORIGINS,
                "a join state holds events of at most {MAX_ORIGINS} (topic, partition) pairs; {topic:?} partition {partition} is one more"
            );
            self.origins.push((topic.clone(), partition));
            self.origins.len() - 1
        });
        u16::try_from(ix).expect("below MAX_ORIGINS")
    }
}

/// Lengths in the store are 32-bit: Kafka caps a record far below 4 GiB (message.max.bytes).
fn len32(len: usize) -> u32 {
    u32::try_from(len).expect("a Kafka record field is smaller than 4 GiB")
}

fn get_u32(r: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(r[at..at + 4].try_into().expect("4 bytes"))
}

fn get_i64(r: &[u8], at: usize) -> i64 {
    i64::from_ne_bytes(r[at..at + 8].try_into().expect("8 bytes"))
}

fn flags_side(flags: u8) -> Side {
    match flags & RIGHT {
        0 => Side::Left,
        _ => Side::Right,
    }
}

/// The record at `at` in a segment in RAM, to the end of the segment's filled part; `None` past
/// the end, and for a spilled (or freed) segment.
#[inline]
fn resident(segment: &Segment, at: usize) -> Option<&[u8]> {
    segment.bytes.get(at..).filter(|r| !r.is_empty())
}

/// Bytes of the record at the start of `r`.
fn record_size(r: &[u8]) -> usize {
    let value_len = match get_u32(r, VALUE_LEN) {
        TOMBSTONE => 0,
        len => len as usize,
    };
    let headers_at = HEADER + get_u32(r, KEY_LEN) as usize + value_len;
    match r[FLAGS] & HAS_HEADERS {
        0 => headers_at,
        _ => headers_at + 4 + get_u32(r, headers_at) as usize,
    }
}

/// Every record in a segment's bytes, removed or not, each from its header to the segment's end.
fn records(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let r = bytes;
        (!r.is_empty()).then(|| {
            bytes = &r[record_size(r)..];
            r
        })
    })
}

/// The event whose record starts `r`.
fn decode(origins: &[(Arc<str>, i32)], r: &[u8]) -> Event {
    let origin = usize::from(r[ORIGIN]) | (usize::from(r[FLAGS] >> ORIGIN_FLAG_SHIFT) << 8);
    let (topic, partition) = &origins[origin];
    let key_len = get_u32(r, KEY_LEN) as usize;
    let value_at = HEADER + key_len;
    let value_len = match get_u32(r, VALUE_LEN) {
        TOMBSTONE => None,
        len => Some(len as usize),
    };
    let headers_at = value_at + value_len.unwrap_or(0);
    Event {
        topic: topic.clone(),
        partition: *partition,
        offset: get_i64(r, OFFSET),
        timestamp: get_i64(r, TIMESTAMP),
        key: Some(Box::from(&r[HEADER..value_at])),
        value: value_len.map(|len| Box::from(&r[value_at..value_at + len])),
        headers: match r[FLAGS] & HAS_HEADERS {
            0 => Box::default(),
            _ => {
                let len = get_u32(r, headers_at) as usize;
                decode_headers(&r[headers_at + 4..headers_at + 4 + len])
            }
        },
    }
}

fn decode_headers(mut b: &[u8]) -> Box<[Header]> {
    let mut headers = Vec::new();
    let take_u32 = |b: &mut &[u8]| {
        let (n, rest) = b.split_at(4);
        *b = rest;
        u32::from_ne_bytes(n.try_into().expect("4 bytes"))
    };
    while !b.is_empty() {
        let key_len = take_u32(&mut b) as usize;
        let (key, rest) = b.split_at(key_len);
        b = rest;
        let key = String::from_utf8(key.to_vec()).expect("stored from a String");
        let value = match take_u32(&mut b) {
            TOMBSTONE => None,
            n => {
                let (v, rest) = b.split_at(n as usize);
                b = rest;
                Some(v.to_vec())
            }
        };
        headers.push(Header { key, value });
    }
    headers.into_boxed_slice()
}

#[cfg(test)]
mod tests;
