//! A segment: one run of an event store's records packed back to back, its live count, whether it
//! is spilled, and what its live events need ([`Needs`]), kept per segment so that commit points
//! cost a look per segment rather than per held event. Segment sizes are here too.

use std::cell::Cell;

use super::record::{get_i64, records, Origins, DEAD, FLAGS, OFFSET, PARTNER};
use super::spill::Disk;
use super::UNMATCHED;
use crate::event::{Side, MAX_TOPICS};

/// Segment sizes double from the smallest to the largest, so an idle task holds little and a busy
/// one wastes at most the tail of a large segment per segment. An event larger than the largest
/// gets a segment of its own size.
pub(super) const MIN_SEGMENT: usize = 4 * 1024;
pub(super) const MAX_SEGMENT: usize = 256 * 1024;

pub(super) struct Segment {
    /// Empty while spilled, and once every event in it was removed.
    pub(super) bytes: Vec<u8>,
    /// Events in this segment not yet removed.
    pub(super) live: u32,
    pub(super) spilled: Option<Spilled>,
    /// What the segment's live events need ([`Needs`]), so that commit points cost a look per
    /// segment, not per held event (a task holding 480,000 events spent most of its time
    /// scanning them for every round's commit points). Kept exact for a segment in RAM:
    /// recomputed from its records (`stale`) after an event leaves or changes partner.
    pub(super) needs: Cell<Needs>,
    pub(super) stale: Cell<bool>,
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
    pub(super) fn needs(&self, origins: &Origins) -> Needs {
        if self.stale.get() && self.spilled.is_none() {
            let mut needs = Needs::NONE;
            for r in records(&self.bytes) {
                if r[FLAGS] & DEAD == 0 {
                    needs.add(origins.side(r), get_i64(r, OFFSET), get_i64(r, PARTNER));
                }
            }
            self.needs.set(needs);
            self.stale.set(false);
        }
        self.needs.get()
    }
}

pub(super) struct Spilled {
    pub(super) disk: Disk,
}

/// The smallest offsets a segment's live events need, per side: kept in RAM so that a commit
/// (every second or faster) neither scans every held event nor reads the disk. Exact for a segment
/// in RAM; for a spilled one, taken when it is spilled and only lowered after (an event leaving
/// leaves a bound lower than needed, which holds a commit back until the segment is read back to
/// expire).
///
/// The partner offsets are a two-topic join's: an N-way join uses an event's partner field for
/// other marks (join/state/nway.rs) and asks for no partner offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// By side, the smallest offset of a live event of that side; `i64::MAX` for none.
    pub(super) own: [i64; MAX_TOPICS],
    /// By side, the smallest partner offset (of the other side) of a matched live event of that
    /// side; `i64::MAX` for none.
    pub(super) partner: [i64; MAX_TOPICS],
}

impl Needs {
    pub(super) const NONE: Needs = Needs {
        own: [i64::MAX; MAX_TOPICS],
        partner: [i64::MAX; MAX_TOPICS],
    };

    /// (side, offset) pairs, as [`EventStore::live`]'s events give them: each side's own smallest
    /// offset, and, of the sides `partner_needed` names (only ever sides of a two-topic join),
    /// the smallest partner offset.
    pub fn offsets(
        &self,
        partner_needed: impl Fn(Side) -> bool,
    ) -> impl Iterator<Item = (Side, i64)> {
        let [own, partner] = [self.own, self.partner];
        Side::all(MAX_TOPICS).flat_map(move |side| {
            let i = side.index();
            let own = (own[i] != i64::MAX).then_some((side, own[i]));
            let partner = (partner[i] != i64::MAX && partner_needed(side))
                .then_some((side.opposite(), partner[i]));
            own.into_iter().chain(partner)
        })
    }

    pub(super) fn add(&mut self, side: Side, offset: i64, partner_offset: i64) {
        let i = side.index();
        self.own[i] = self.own[i].min(offset);
        if partner_offset != UNMATCHED {
            self.partner[i] = self.partner[i].min(partner_offset);
        }
    }
}

/// The record at `at` in a segment in RAM, to the end of the segment's filled part; `None` past
/// the end, and for a spilled (or freed) segment.
#[inline]
pub(super) fn resident(segment: &Segment, at: usize) -> Option<&[u8]> {
    segment.bytes.get(at..).filter(|r| !r.is_empty())
}
