//! An event's record in a segment: the fixed header's layout and flags, writing a record, and
//! reading records back (their sizes, walking a segment, decoding one into an [`Event`]). The
//! store and its segments read fields through these offsets, never through a cast.

use std::sync::Arc;

use super::Links;
use crate::event::{Event, Header, Side};

// Header layout, native-endian, unaligned (read with `from_ne_bytes`, never cast):
pub(super) const TIMESTAMP: usize = 0; // i64
pub(super) const OFFSET: usize = 8; // i64
pub(super) const PARTNER: usize = 16; // i64, mutable
pub(super) const NEXT: usize = 24; // Handle, mutable
pub(super) const KEY_LEN: usize = 32; // u32
pub(super) const VALUE_LEN: usize = 36; // u32, TOMBSTONE for no value
pub(super) const ORIGIN: usize = 40; // u8, the low 8 bits of the index into `origins`
pub(super) const FLAGS: usize = 41; // u8: RIGHT, HAS_HEADERS, OUT_OF_ORDER, DEAD; top 4: origin bits 8-11
/// Bytes before an event's key.
pub const HEADER: usize = 42;

/// The lowest bit of the event's side: set for the right side of a two-topic join, for topics
/// 1, 3, 5 and 7 of an N-way join. The side's other bits are its origin's ([`Origin::side_pair`]).
pub(super) const RIGHT: u8 = 1;
/// The value is followed by a u32 length and the encoded headers; most events have none.
pub(super) const HAS_HEADERS: u8 = 2;
/// Not in the log's close-time order: the state keeps it in its expiry heap instead.
pub(super) const OUT_OF_ORDER: u8 = 4;
/// Removed; its bytes stay until its segment is freed.
pub(super) const DEAD: u8 = 8;

pub(super) const TOMBSTONE: u32 = u32::MAX;

/// The index into `origins` is 12 bits: its [`ORIGIN`] byte and the 4 bits the flags leave free.
/// The header is packed, with no padding to grow into: a wider field would cost every held event
/// a byte. A live task holds two (topic, partition) pairs; only `plugin test` with a key from the
/// value sends a whole recording to one task, and 256 pairs were too few there.
pub(super) const ORIGIN_FLAG_SHIFT: u32 = 4;

/// (topic, partition) pairs one store, one task's join state, can hold events of.
pub const MAX_ORIGINS: usize = 1 << (8 + ORIGIN_FLAG_SHIFT);

/// Where a store's events come from: per origin index, a (topic, partition) and the upper bits of
/// the side its events were pushed as. The side takes no header bit beyond [`RIGHT`]: a two-topic
/// join's sides are 0 and 1, so its origins are one per (topic, partition) as ever and its side
/// is read from the flags alone; a join of more topics puts `side / 2` in the origin, so a topic
/// joined with itself as sides 0 and 2 takes two origins (sides 0 and 1 share one).
#[derive(Default)]
pub(super) struct Origins {
    list: Vec<Origin>,
    /// Whether an origin has a `side_pair` other than 0: if not, the flags say the side.
    wide: bool,
}

pub(super) struct Origin {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    /// `side / 2` of the events pushed from this origin.
    pub(super) side_pair: u8,
}

impl Origins {
    /// The index of (`topic`, `partition`, `side`)'s origin, added if new; `None` once
    /// [`MAX_ORIGINS`] are held and it is not one of them.
    pub(super) fn index(&mut self, topic: &Arc<str>, partition: i32, side: Side) -> Option<u16> {
        let side_pair = (side.index() / 2) as u8;
        let found = self.list.iter().position(|o| {
            o.partition == partition
                && o.side_pair == side_pair
                && (Arc::ptr_eq(&o.topic, topic) || *o.topic == **topic)
        });
        let ix = match found {
            Some(ix) => ix,
            None if self.list.len() < MAX_ORIGINS => {
                self.list.push(Origin {
                    topic: topic.clone(),
                    partition,
                    side_pair,
                });
                self.wide |= side_pair > 0;
                self.list.len() - 1
            }
            None => return None,
        };
        Some(u16::try_from(ix).expect("below MAX_ORIGINS"))
    }

    /// The side of the event whose record (or header) starts `r`.
    #[inline]
    pub(super) fn side(&self, r: &[u8]) -> Side {
        let low = usize::from(r[FLAGS] & RIGHT);
        if !self.wide {
            return Side::of(low);
        }
        Side::of(usize::from(self.list[origin_index(r)].side_pair) * 2 + low)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }
}

fn origin_index(r: &[u8]) -> usize {
    usize::from(r[ORIGIN]) | (usize::from(r[FLAGS] >> ORIGIN_FLAG_SHIFT) << 8)
}

/// Appends the record of `event` with `links` to `b`: the header, then key, value and headers.
/// `origin` is its index into the store's origins; `headers_len` the bytes its headers encode to.
pub(super) fn encode(
    b: &mut Vec<u8>,
    event: &Event,
    links: &Links,
    origin: u16,
    has_headers: bool,
    headers_len: usize,
) {
    b.extend_from_slice(&event.timestamp.to_ne_bytes());
    b.extend_from_slice(&event.offset.to_ne_bytes());
    b.extend_from_slice(&links.partner_offset.to_ne_bytes());
    b.extend_from_slice(&links.next.to_ne_bytes());
    b.extend_from_slice(&len32(event.key_bytes().len()).to_ne_bytes());
    let value_field = event.value.as_ref().map_or(TOMBSTONE, |v| len32(v.len()));
    b.extend_from_slice(&value_field.to_ne_bytes());
    let [origin_low, origin_high] = origin.to_le_bytes();
    b.push(origin_low);
    let side = (links.side.index() & 1) as u8 * RIGHT;
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
}

/// Lengths in the store are 32-bit: Kafka caps a record far below 4 GiB (message.max.bytes).
pub(super) fn len32(len: usize) -> u32 {
    u32::try_from(len).expect("a Kafka record field is smaller than 4 GiB")
}

pub(super) fn get_u32(r: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(r[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn get_i64(r: &[u8], at: usize) -> i64 {
    i64::from_ne_bytes(r[at..at + 8].try_into().expect("8 bytes"))
}

/// Bytes of the record at the start of `r`.
pub(super) fn record_size(r: &[u8]) -> usize {
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
pub(super) fn records(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let r = bytes;
        (!r.is_empty()).then(|| {
            bytes = &r[record_size(r)..];
            r
        })
    })
}

/// The event whose record starts `r`.
pub(super) fn decode(origins: &Origins, r: &[u8]) -> Event {
    let Origin {
        topic, partition, ..
    } = &origins.list[origin_index(r)];
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

pub(super) fn decode_headers(mut b: &[u8]) -> Box<[Header]> {
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
