//! The repartition step's merge, pure: no Kafka, and no clock of its own (the caller passes
//! `now`). The step holds the records it fetched in one queue per source partition and writes the
//! earliest held record first, so that an internal partition gets the source partitions' hours
//! interleaved instead of one partition's hour after another's (whose records the join would find
//! late). It waits for a partition with nothing held, as a join task waits for both its
//! partitions: `join.max_idle` when the broker has nothing more of it, [`BEHIND_WAIT`] when it has
//! (fetching is slow, not the partition quiet). Past [`HELD_MAX`] records held, it waits no more.
//!
//! A batch notes what it wrote ([`Written`]): its first offsets to go back to when the batch
//! fails ([`Merge::rewind`]), its next offsets to commit when it succeeds.
//!
//! The Kafka side (consumer, producer, seeks, commits) is `kafka::repartitioner`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Records held at most for the merge; past it the earliest goes regardless of idle waits.
pub const HELD_MAX: usize = 200_000;
/// How long an empty partition with records still on the broker holds the merge back.
pub const BEHIND_WAIT: Duration = Duration::from_secs(30);

/// A source partition: topic and partition number.
pub type Source = (String, i32);

/// A record fetched and not yet written, with what the merge needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<R> {
    /// Milliseconds since the epoch; a record without one counts as 0 (it goes first).
    pub timestamp: i64,
    pub offset: i64,
    pub record: R,
}

/// A source partition's records fetched and not yet written.
struct Queue<R> {
    records: VecDeque<Held<R>>,
    last_fetch: Instant,
    /// The offset after the last record fetched; at assignment, the group's committed offset.
    next: Option<i64>,
    /// Records on the broker not fetched yet (from the cached high watermark): waited for
    /// however long fetching takes, up to [`BEHIND_WAIT`], as a join task waits (KIP-695).
    behind: bool,
}

impl<R> Queue<R> {
    fn new(next: Option<i64>, now: Instant) -> Queue<R> {
        Queue {
            records: VecDeque::new(),
            last_fetch: now,
            next,
            behind: true,
        }
    }

    /// Still worth waiting for: nothing held, and fetched from recently enough.
    fn waited_for(&self, now: Instant, max_idle: Duration) -> bool {
        let wait = if self.behind { BEHIND_WAIT } else { max_idle };
        self.records.is_empty() && now.saturating_duration_since(self.last_fetch) < wait
    }
}

/// The held records of the partitions the step holds, merged by timestamp.
pub struct Merge<R> {
    queues: BTreeMap<Source, Queue<R>>,
    held: usize,
    /// This round started over the cap: the merge gives up waiting down to half of it.
    forcing: bool,
    max_idle: Duration,
    cap: usize,
}

impl<R> Merge<R> {
    /// A merge that waits `max_idle` (`join.max_idle`) for a quiet partition.
    pub fn new(max_idle: Duration) -> Merge<R> {
        Merge {
            queues: BTreeMap::new(),
            held: 0,
            forcing: false,
            max_idle,
            cap: HELD_MAX,
        }
    }

    /// Records held, all partitions together.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether the step should fetch no more before writing.
    pub fn is_full(&self) -> bool {
        self.held >= self.cap
    }

    /// A record fetched from `at` at `now`.
    pub fn push(&mut self, at: Source, record: Held<R>, now: Instant) {
        let queue = self
            .queues
            .entry(at)
            .or_insert_with(|| Queue::new(None, now));
        queue.last_fetch = now;
        queue.next = Some(record.offset + 1);
        queue.records.push_back(record);
        self.held += 1;
    }

    /// Drops the queues of partitions revoked: their held records are not written (nor
    /// committed), so whoever is given them next reads them from the committed offset.
    pub fn forget(&mut self, revoked: &[Source]) {
        for at in revoked {
            if let Some(q) = self.queues.remove(at) {
                self.held -= q.records.len();
            }
        }
    }

    /// Keeps the queues of the partitions `assigned` only; the assigned partitions without a
    /// queue yet, to [`Merge::start`].
    pub fn follow(&mut self, assigned: &HashSet<Source>) -> Vec<Source> {
        let held = &mut self.held;
        self.queues.retain(|at, q| {
            let keep = assigned.contains(at);
            if !keep {
                *held -= q.records.len();
            }
            keep
        });
        assigned
            .iter()
            .filter(|at| !self.queues.contains_key(*at))
            .cloned()
            .collect()
    }

    /// A partition newly assigned, read from `committed` (`None`: nothing committed, or not
    /// known): the merge waits for its first records from `now`.
    pub fn start(&mut self, at: Source, committed: Option<i64>, now: Instant) {
        self.queues.insert(at, Queue::new(committed, now));
    }

    /// Notes from each partition's low and high watermarks (`None`: not known) whether records
    /// remain on the broker that it has not fetched.
    pub fn note_watermarks(&mut self, mut watermarks: impl FnMut(&Source) -> Option<(i64, i64)>) {
        for (at, q) in self.queues.iter_mut() {
            q.behind = behind(q.next, watermarks(at));
        }
    }

    /// Starts a round of writes: one that starts over the cap goes on down to half of it.
    pub fn begin_round(&mut self) {
        self.forcing = self.is_full();
    }

    /// The partition whose held record comes next in timestamp order, once every partition
    /// holds a record or has waited long enough (see the module's doc); `None` while the merge
    /// waits, or holds nothing. Ties go to the first partition in (topic, partition) order.
    pub fn choose(&self, now: Instant) -> Option<Source> {
        // Over the cap: the earliest goes regardless, down to half the cap (one at a time would
        // flush and commit for every record).
        let forced = self.forcing && self.held >= self.cap / 2;
        if !forced {
            let waiting = self
                .queues
                .values()
                .any(|q| q.waited_for(now, self.max_idle));
            if waiting && self.held < self.cap {
                return None;
            }
        }
        self.earliest()
    }

    /// Takes the first record held of `at` (as [`Merge::choose`] chose it): a partition's records
    /// go in the order they were fetched.
    pub fn take(&mut self, at: &Source) -> Option<Held<R>> {
        let record = self.queues.get_mut(at)?.records.pop_front()?;
        self.held -= 1;
        Some(record)
    }

    fn earliest(&self) -> Option<Source> {
        self.queues
            .iter()
            .filter_map(|(at, q)| Some((q.records.front()?.timestamp, at)))
            .min()
            .map(|(_, at)| at.clone())
    }

    /// A batch that wrote `written` failed: the records held of each partition it wrote are
    /// dropped, as they will be fetched again from its first offset written, which is returned
    /// per partition (to seek to). Partitions the batch did not write keep their records.
    pub fn rewind(&mut self, written: &Written) -> Vec<(Source, i64)> {
        written
            .0
            .iter()
            .map(|(at, &(first, _))| {
                if let Some(q) = self.queues.get_mut(at) {
                    self.held -= q.records.len();
                    q.records.clear();
                }
                (at.clone(), first)
            })
            .collect()
    }
}

/// Whether a partition read up to `next` has records on the broker not fetched yet.
fn behind(next: Option<i64>, watermarks: Option<(i64, i64)>) -> bool {
    match (next, watermarks) {
        (Some(next), Some((_, high))) => next < high,
        // Nothing fetched or committed: behind unless the partition holds nothing.
        (None, Some((low, high))) => high > low.max(0),
        (_, None) => true,
    }
}

/// What a batch wrote of each source partition: the first offset (to go back to) and the next
/// offset (to commit).
#[derive(Debug, Default)]
pub struct Written(HashMap<Source, (i64, i64)>);

impl Written {
    /// The record at `offset` of `at` was taken for writing (noted before it is written: a batch
    /// that fails on it reads it again).
    pub fn note(&mut self, at: Source, offset: i64) {
        self.0.entry(at).or_insert((offset, offset)).1 = offset + 1;
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The offsets to commit once the batch is written: the next of each partition.
    pub fn commits(&self) -> impl Iterator<Item = (&Source, i64)> {
        self.0.iter().map(|(at, &(_, next))| (at, next))
    }
}

#[cfg(test)]
mod tests;
