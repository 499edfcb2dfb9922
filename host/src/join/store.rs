//! Where the join state keeps its held events: one task's events packed back to back into large
//! byte segments, each event a fixed header followed by its key, value and headers.
//!
//! Why not one `Arc<Event>` per held event: that costs a 104-byte struct and `Arc` header plus
//! three heap allocations per event, about 200 bytes over key + value (benches/memory.rs). Here an
//! event costs [`HEADER`] bytes over its payload and no allocation of its own.
//!
//! Events mostly leave in the order they arrived (a window closes in event-time order), so a
//! segment empties as a whole and is freed then; one long-held event keeps only its own segment.
//! A [`Handle`] names an event by segment number and byte offset, so handles grow in arrival order.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::event::{Event, Header, Side};

/// An event in the store: `segment number << 32 | byte offset in the segment`.
pub type Handle = u64;

/// The `next` of the last event in a chain.
pub const NO_HANDLE: Handle = u64::MAX;

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
const ORIGIN: usize = 40; // u8, index into `origins`
const FLAGS: usize = 41; // u8: RIGHT, HAS_HEADERS, OUT_OF_ORDER, DEAD
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

struct Segment {
    bytes: Vec<u8>,
    /// Events in this segment not yet removed.
    live: u32,
}

#[derive(Default)]
pub struct EventStore {
    /// Segments by number, from `first` on; a segment with no live event has its bytes freed.
    segments: VecDeque<Segment>,
    first: u64,
    /// (topic, partition) pairs the events came from; a task has one per side.
    origins: Vec<(Arc<str>, i32)>,
    /// Capacity of the newest segment, which the next one doubles.
    last_segment: usize,
    /// Sum of the sizes of the live events.
    live_bytes: usize,
}

/// What [`EventStore::push`] stores besides the event.
pub struct Links {
    pub side: Side,
    pub partner_offset: i64,
    pub next: Handle,
    /// The event closes before one pushed earlier; see [`EventStore::in_order_from`].
    pub out_of_order: bool,
}

impl EventStore {
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
            self.segments.push_back(Segment {
                bytes: Vec::with_capacity(self.last_segment.max(size)),
                live: 0,
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
        b.push(origin);
        let side = if links.side == Side::Right { RIGHT } else { 0 };
        let out_of_order = if links.out_of_order { OUT_OF_ORDER } else { 0 };
        b.push(side | out_of_order | if has_headers { HAS_HEADERS } else { 0 });
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
        self.live_bytes += size;
        (number << 32) | at as u64
    }

    /// Removes the event: its bytes are freed once every event of its segment is removed.
    pub fn remove(&mut self, h: Handle) {
        self.live_bytes -= self.size(h);
        let flags = self.record(h)[FLAGS];
        self.set_field(h, FLAGS, [flags | DEAD]);
        let (ix, _) = self.split(h);
        let filling = ix + 1 == self.segments.len();
        let segment = &mut self.segments[ix];
        segment.live -= 1;
        if segment.live == 0 {
            if filling {
                // The segment being filled: reuse it from the start.
                segment.bytes.clear();
            } else {
                segment.bytes = Vec::new();
            }
        }
        while self.segments.len() > 1 && self.segments[0].live == 0 {
            self.segments.pop_front();
            self.first += 1;
        }
    }

    pub fn timestamp(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, TIMESTAMP))
    }

    pub fn offset(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, OFFSET))
    }

    pub fn partner_offset(&self, h: Handle) -> i64 {
        i64::from_ne_bytes(self.field(h, PARTNER))
    }

    pub fn set_partner_offset(&mut self, h: Handle, offset: i64) {
        self.set_field(h, PARTNER, offset.to_ne_bytes());
    }

    pub fn next(&self, h: Handle) -> Handle {
        u64::from_ne_bytes(self.field(h, NEXT))
    }

    pub fn set_next(&mut self, h: Handle, next: Handle) {
        self.set_field(h, NEXT, next.to_ne_bytes());
    }

    pub fn side(&self, h: Handle) -> Side {
        match self.record(h)[FLAGS] & RIGHT {
            0 => Side::Left,
            _ => Side::Right,
        }
    }

    pub fn key(&self, h: Handle) -> &[u8] {
        &self.record(h)[HEADER..HEADER + self.key_len(h)]
    }

    /// The event as it was pushed.
    pub fn event(&self, h: Handle) -> Event {
        let r = self.record(h);
        let (topic, partition) = &self.origins[r[ORIGIN] as usize];
        let value_at = HEADER + self.key_len(h);
        let value_len = self.value_len(h);
        let headers_at = value_at + value_len.unwrap_or(0);
        Event {
            topic: topic.clone(),
            partition: *partition,
            offset: self.offset(h),
            timestamp: self.timestamp(h),
            key: Some(Box::from(self.key(h))),
            value: value_len.map(|len| Box::from(&r[value_at..value_at + len])),
            headers: match self.headers_len(h, headers_at) {
                None => Box::default(),
                Some(len) => decode_headers(&r[headers_at + 4..headers_at + 4 + len]),
            },
        }
    }

    /// Where the log continues after `h`: pass it to [`Self::in_order_from`], also after `h` is
    /// removed.
    pub fn after(&self, h: Handle) -> Handle {
        h + self.size(h) as u64
    }

    /// The first live event at or after `from` in the log that was not pushed out of order, if
    /// any. Together with the order they were pushed in, this walks the in-order events oldest
    /// first without an index.
    pub fn in_order_from(&self, from: Handle) -> Option<Handle> {
        self.records_from(from)
            .find(|&h| self.record(h)[FLAGS] & (DEAD | OUT_OF_ORDER) == 0)
    }

    /// Every live event, in the order they were pushed.
    pub fn live(&self) -> impl Iterator<Item = Handle> + '_ {
        self.records_from(self.first << 32)
            .filter(|&h| self.record(h)[FLAGS] & DEAD == 0)
    }

    /// Every event still in a segment, removed or not, from `from` on in the order pushed.
    fn records_from(&self, from: Handle) -> impl Iterator<Item = Handle> + '_ {
        let (mut number, mut at) = match from >> 32 {
            // Its segment was freed and dropped: the log goes on at the oldest one left.
            number if number < self.first => (self.first, 0),
            number => (number, (from & u64::from(u32::MAX)) as usize),
        };
        std::iter::from_fn(move || loop {
            let segment = self.segments.get((number - self.first) as usize)?;
            // A freed segment has no bytes, so this skips it.
            if at < segment.bytes.len() {
                let h = (number << 32) | at as u64;
                at += self.size(h);
                return Some(h);
            }
            number += 1;
            at = 0;
        })
    }

    /// Bytes the live events take, headers included.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Bytes the event takes in its segment.
    fn size(&self, h: Handle) -> usize {
        let headers_at = HEADER + self.key_len(h) + self.value_len(h).unwrap_or(0);
        headers_at + self.headers_len(h, headers_at).map_or(0, |len| 4 + len)
    }

    fn key_len(&self, h: Handle) -> usize {
        u32::from_ne_bytes(self.field(h, KEY_LEN)) as usize
    }

    /// `None` for a tombstone.
    fn value_len(&self, h: Handle) -> Option<usize> {
        match u32::from_ne_bytes(self.field(h, VALUE_LEN)) {
            TOMBSTONE => None,
            len => Some(len as usize),
        }
    }

    /// Bytes of the encoded headers that follow their length at `at`, or `None` without headers.
    fn headers_len(&self, h: Handle, at: usize) -> Option<usize> {
        (self.record(h)[FLAGS] & HAS_HEADERS != 0)
            .then(|| u32::from_ne_bytes(self.field(h, at)) as usize)
    }

    /// (index into `segments`, byte offset in that segment) of `h`.
    fn split(&self, h: Handle) -> (usize, usize) {
        (
            (h >> 32) as usize - self.first as usize,
            (h & u64::from(u32::MAX)) as usize,
        )
    }

    /// The event's bytes from its header on (to the end of its segment's filled part).
    fn record(&self, h: Handle) -> &[u8] {
        let (ix, at) = self.split(h);
        &self.segments[ix].bytes[at..]
    }

    fn field<const N: usize>(&self, h: Handle, at: usize) -> [u8; N] {
        self.record(h)[at..at + N]
            .try_into()
            .expect("slice of length N")
    }

    fn set_field<const N: usize>(&mut self, h: Handle, at: usize, bytes: [u8; N]) {
        let (ix, start) = self.split(h);
        let start = start + at;
        self.segments[ix].bytes[start..start + N].copy_from_slice(&bytes);
    }

    #[cfg(test)]
    pub fn is_out_of_order(&self, h: Handle) -> bool {
        self.record(h)[FLAGS] & OUT_OF_ORDER != 0
    }

    fn origin(&mut self, topic: &Arc<str>, partition: i32) -> u8 {
        let found = self
            .origins
            .iter()
            .position(|(t, p)| *p == partition && (Arc::ptr_eq(t, topic) || **t == **topic));
        let ix = found.unwrap_or_else(|| {
            self.origins.push((topic.clone(), partition));
            self.origins.len() - 1
        });
        u8::try_from(ix).expect("a task reads two partitions, far below 256")
    }
}

/// Lengths in the store are 32-bit: Kafka caps a record far below 4 GiB (message.max.bytes).
fn len32(len: usize) -> u32 {
    u32::try_from(len).expect("a Kafka record field is smaller than 4 GiB")
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
