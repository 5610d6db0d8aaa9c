//! What the core remembers for the horizon: per (gpu, second), the first usage and the first
//! power reading, in one record — the join of SPEC §4 then finds both halves in one place.
//!
//! Records sit in arrival order in fixed-size chunks (no reallocation, no doubling: memory
//! follows the readings held), and two kinds of small index point into them by sequence
//! number: (gpu, second) → record, and per stream event id → record. An index entry is a
//! 4-byte sequence number plus hashbrown's control byte, so a reading held costs ≈ 52 bytes
//! of record and ≈ 10 of index, against ≈ 100 with a hash map per stream keyed by value.
//! Eviction pops records from the front, as `Rater.evict` (streams/rating/reference.py)
//! does, and drops their index entries.
//!
//! A reading's "content", compared when its event id is held already (SPEC §4: the same id
//! with the same content is one reading, with other content a conflict), is what a record
//! holds of it: its (gpu, second), and for usage tenant, instance and model, for power site,
//! node, milliwatts and the counter (energy_mj and epoch). The Python reference compares the
//! same (`_same_content`).

use std::collections::VecDeque;
use std::hash::Hasher;

use hashbrown::HashTable;

use crate::counters::Sample;
use crate::hashing::FxHasher;
use crate::interner::NONE;

/// An event id as two independent 64-bit hashes: the first finds it in the id index, the
/// second confirms it. Two ids agreeing on both by chance: ≈ 2^-127. The text itself is not
/// kept (it was half the memory of a reading held); a conflict's kept id is read back from
/// ClickHouse by the caller. The second hash is never 0: (0, 0) marks a half not held.
pub type EventHash = (u64, u64);

const ABSENT: EventHash = (0, 0);

#[derive(Clone, Copy)]
pub struct UsageSeen {
    pub id: EventHash,
    /// Where it was read in its partition: the spend marks judge a join by it (spend.rs).
    pub offset: u64,
    pub tenant: u32,
    pub instance: u32,
    pub model: u32,
    /// Spend only (rate.rs `SPENT_*`): what of this (gpu, second) this process counted, so
    /// that a reading re-read after a crash counts once. In the record's padding: no bytes added.
    pub spent: u8,
}

#[derive(Clone, Copy)]
pub struct PowerSeen {
    pub id: EventHash,
    pub offset: u64,
    pub site: u32,
    pub node: u32,
    pub power_mw: u32, // ≤ 5,000,000
    pub partition: u32,
    /// The card's counter (billing_rules/counters.py): 0 and `NONE` when the reading carries none.
    pub energy_mj: u64,
    pub epoch: u32,
}

impl PowerSeen {
    /// What the counter arithmetic (counters.rs) needs of the reading held for `second`.
    pub fn sample(&self, second: i64) -> Sample {
        Sample { second, power_mw: self.power_mw, energy_mj: self.energy_mj, epoch: self.epoch }
    }
}

/// One (gpu, second): 104 bytes (80 before the usage half kept its offset for the spend marks,
/// 88 before the power half kept the card's counter).
pub struct Pair {
    key: u64,
    usage: UsageSeen,
    power: PowerSeen,
}

const _: () = assert!(std::mem::size_of::<Pair>() == 104);

/// A stream's half of a `Pair`.
pub trait Half: Copy {
    /// Index of the stream's id index in `Held::ids`.
    const SIDE: usize;
    const EMPTY: Self;
    fn id(&self) -> EventHash;
    fn of(pair: &Pair) -> &Self;
    fn of_mut(pair: &mut Pair) -> &mut Self;
    /// Whether `other` says what `self` says, as far as it is held (not the id, nor where
    /// in Kafka it was read).
    fn same_content(&self, other: &Self) -> bool;
}

impl Half for UsageSeen {
    const SIDE: usize = 0;
    const EMPTY: Self = UsageSeen { id: ABSENT, offset: 0, tenant: 0, instance: 0, model: 0, spent: 0 };
    fn id(&self) -> EventHash {
        self.id
    }
    fn of(pair: &Pair) -> &Self {
        &pair.usage
    }
    fn of_mut(pair: &mut Pair) -> &mut Self {
        &mut pair.usage
    }
    fn same_content(&self, other: &Self) -> bool {
        (self.tenant, self.instance, self.model) == (other.tenant, other.instance, other.model)
    }
}

impl Half for PowerSeen {
    const SIDE: usize = 1;
    const EMPTY: Self = PowerSeen { id: ABSENT, offset: 0, site: 0, node: 0, power_mw: 0, partition: 0, energy_mj: 0, epoch: NONE };
    fn id(&self) -> EventHash {
        self.id
    }
    fn of(pair: &Pair) -> &Self {
        &pair.power
    }
    fn of_mut(pair: &mut Pair) -> &mut Self {
        &mut pair.power
    }
    fn same_content(&self, other: &Self) -> bool {
        (self.site, self.node, self.power_mw, self.energy_mj, self.epoch)
            == (other.site, other.node, other.power_mw, other.energy_mj, other.epoch)
    }
}

/// What `Held::admit` found: the same event id with the same content again, a conflict
/// (why: `Clash`), or the first (now held in the record `Slot`).
#[derive(Debug, PartialEq)]
pub enum Admitted {
    /// The same reading again; the slot of the one held.
    Duplicate(Slot),
    Conflict(Clash),
    First(Slot),
}

/// Why a reading conflicts with one held.
#[derive(Debug, PartialEq, Clone, Copy)]
pub enum Clash {
    /// Another event id holds its (gpu, second).
    SecondTaken,
    /// Its event id is held with other content (another card, second or value).
    IdReused,
}

impl Clash {
    /// The `reason` column of the conflicts table (as streams/rating/reference.py writes it).
    pub fn reason(self) -> &'static str {
        match self {
            Clash::SecondTaken => "second taken",
            Clash::IdReused => "event_id reused",
        }
    }
}

/// Where a (gpu, second) is held, until the next eviction.
#[derive(Debug, PartialEq, Clone, Copy)]
pub struct Slot(u32);

const CHUNK: usize = 4096; // records per chunk: 352 KiB

/// The records, oldest first: record `seq` (counted from the first ever held) is at
/// position `seq - front + head` of the chunks. Indexes keep the low 32 bits of a `seq`;
/// fewer than 2^32 records are ever held at once, so they identify it.
#[derive(Default)]
struct Records {
    chunks: VecDeque<Vec<Pair>>,
    head: usize,
    front: u64,
    next: u64,
}

impl Records {
    fn at(&self, seq: u32) -> &Pair {
        let place = self.head + seq.wrapping_sub(self.front as u32) as usize;
        &self.chunks[place / CHUNK][place % CHUNK]
    }

    fn at_mut(&mut self, seq: u32) -> &mut Pair {
        let place = self.head + seq.wrapping_sub(self.front as u32) as usize;
        &mut self.chunks[place / CHUNK][place % CHUNK]
    }

    fn push(&mut self, pair: Pair) -> u32 {
        if self.chunks.back().is_none_or(|last| last.len() == CHUNK) {
            self.chunks.push_back(Vec::with_capacity(CHUNK));
        }
        self.chunks.back_mut().expect("a chunk with room").push(pair);
        self.next += 1;
        (self.next - 1) as u32
    }

    fn first(&self) -> Option<&Pair> {
        (self.front < self.next).then(|| self.at(self.front as u32))
    }

    fn pop(&mut self) {
        self.front += 1;
        self.head += 1;
        if self.head == CHUNK {
            self.chunks.pop_front();
            self.head = 0;
        }
    }
}

fn key_hash(key: u64) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write_u64(key);
    hasher.finish()
}

/// Both streams' readings for the horizon.
#[derive(Default)]
pub struct Held {
    records: Records,
    by_key: HashTable<u32>,
    ids: [HashTable<u32>; 2],
    counts: [usize; 2],
}

impl Held {
    /// Readings held: (usage, power).
    pub fn len(&self) -> (usize, usize) {
        (self.counts[0], self.counts[1])
    }

    /// Bytes allocated for what is held: the record chunks and the indexes.
    pub fn bytes(&self) -> usize {
        let chunks = self.records.chunks.iter().map(|chunk| chunk.capacity()).sum::<usize>() * size_of::<Pair>();
        chunks + self.by_key.allocation_size() + self.ids.iter().map(HashTable::allocation_size).sum::<usize>()
    }

    fn find(&self, key: u64) -> Option<u32> {
        self.by_key.find(key_hash(key), |seq| self.records.at(*seq).key == key).copied()
    }

    /// The reading of stream `T` held for `key`.
    pub fn get<T: Half>(&self, key: u64) -> Option<&T> {
        self.get_at(Slot(self.find(key)?))
    }

    /// The reading of stream `T` held in `slot`.
    pub fn get_at<T: Half>(&self, slot: Slot) -> Option<&T> {
        Some(T::of(self.records.at(slot.0))).filter(|half| half.id() != ABSENT)
    }

    /// The usage half held at `slot`, to mark what of it was spent (rate.rs).
    pub fn usage_mut(&mut self, slot: Slot) -> &mut UsageSeen {
        &mut self.records.at_mut(slot.0).usage
    }

    /// The record held for `key`, if any (either half).
    pub fn slot(&self, key: u64) -> Option<Slot> {
        self.find(key).map(Slot)
    }

    pub fn contains<T: Half>(&self, key: u64) -> bool {
        self.get::<T>(key).is_some()
    }

    /// SPEC §4 on one stream, and remember `seen` when it is the first reading of its
    /// (gpu, second).
    pub fn admit<T: Half>(&mut self, key: u64, seen: T) -> Admitted {
        let id = seen.id();
        if let Some(seq) = self.ids[T::SIDE].find(id.0, |seq| T::of(self.records.at(*seq)).id() == id) {
            let pair = self.records.at(*seq);
            return if pair.key == key && T::of(pair).same_content(&seen) {
                Admitted::Duplicate(Slot(*seq))
            } else {
                Admitted::Conflict(Clash::IdReused)
            };
        }
        let found = self.find(key);
        if found.is_some_and(|seq| T::of(self.records.at(seq)).id() != ABSENT) {
            return Admitted::Conflict(Clash::SecondTaken);
        }
        Admitted::First(self.hold(key, found, seen, true))
    }

    /// Remember a reading ClickHouse holds (preloaded) unless one is held for its (gpu, second);
    /// whether it was. Its id is indexed unless a reading held already has it: an id names the
    /// first record held with it, as in the Python reference (`Rater._hold`).
    pub fn remember<T: Half>(&mut self, key: u64, seen: T) -> bool {
        let found = self.find(key);
        if found.is_none_or(|seq| T::of(self.records.at(seq)).id() == ABSENT) {
            let id = seen.id();
            let known = self.ids[T::SIDE].find(id.0, |seq| T::of(self.records.at(*seq)).id() == id).is_some();
            self.hold(key, found, seen, !known);
            return true;
        }
        false
    }

    /// Put `seen` in the record of `key` (`found`, or a new one), whose half for T is empty;
    /// with `index`, its id in the id index (the caller knows it is not there yet).
    fn hold<T: Half>(&mut self, key: u64, found: Option<u32>, seen: T, index: bool) -> Slot {
        let Held { records, by_key, ids, counts } = self;
        let seq = found.unwrap_or_else(|| {
            let seq = records.push(Pair { key, usage: UsageSeen::EMPTY, power: PowerSeen::EMPTY });
            by_key.insert_unique(key_hash(key), seq, |seq| key_hash(records.at(*seq).key));
            seq
        });
        *T::of_mut(records.at_mut(seq)) = seen;
        if index {
            ids[T::SIDE].insert_unique(seen.id().0, seq, |seq| T::of(records.at(*seq)).id().0);
        }
        counts[T::SIDE] += 1;
        Slot(seq)
    }

    /// Forget records from the oldest while their second is before `cutoff` (arrival
    /// order: a late record behind a fresh one waits for it). Returns the readings dropped.
    pub fn evict(&mut self, cutoff: i64, second_of: impl Fn(u64) -> i64) -> usize {
        let mut dropped = 0;
        while let Some(pair) = self.records.first() {
            if second_of(pair.key) >= cutoff {
                break;
            }
            let seq = self.records.front as u32;
            let (key, usage, power) = (pair.key, pair.usage.id, pair.power.id);
            let Held { by_key, ids, counts, .. } = self;
            Self::unindex(by_key, key_hash(key), seq);
            for (side, id) in [usage, power].into_iter().enumerate() {
                if id != ABSENT {
                    Self::unindex(&mut ids[side], id.0, seq);
                    counts[side] -= 1;
                    dropped += 1;
                }
            }
            self.records.pop();
        }
        dropped
    }

    fn unindex(index: &mut HashTable<u32>, hash: u64, seq: u32) {
        if let Ok(entry) = index.find_entry(hash, |held| *held == seq) {
            entry.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(id: u64, tenant: u32) -> UsageSeen {
        UsageSeen { id: (id, id | 1), offset: 0, tenant, instance: 0, model: 0, spent: 0 }
    }

    fn power(id: u64, mw: u32) -> PowerSeen {
        PowerSeen { id: (id, id | 1), offset: 0, site: 0, node: 0, power_mw: mw, partition: 0, energy_mj: 0, epoch: NONE }
    }

    fn second(key: u64) -> i64 {
        key as i64
    }

    #[test]
    fn first_duplicate_conflict_per_stream() {
        let mut held = Held::default();
        assert!(matches!(held.admit(7, usage(1, 10)), Admitted::First(_)));
        assert!(matches!(held.admit(7, usage(1, 10)), Admitted::Duplicate(_)));
        // The same id with other content: another (gpu, second), or another tenant.
        assert_eq!(held.admit(8, usage(1, 10)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.admit(7, usage(1, 11)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.admit(7, usage(2, 11)), Admitted::Conflict(Clash::SecondTaken));
        // A reused id is not held: the (gpu, second) it named is still free.
        assert!(held.get::<UsageSeen>(8).is_none());
        // The other stream's id space and half are its own.
        assert!(matches!(held.admit(7, power(1, 500)), Admitted::First(_)));
        assert_eq!(held.get::<UsageSeen>(7).map(|u| u.tenant), Some(10));
        assert_eq!(held.get::<PowerSeen>(7).map(|p| p.power_mw), Some(500));
        assert!(held.get::<PowerSeen>(8).is_none());
        assert_eq!(held.len(), (1, 1));
    }

    #[test]
    fn eviction_drops_records_and_their_ids_across_chunks() {
        let mut held = Held::default();
        let n = 3 * CHUNK as u64 + 5;
        for s in 0..n {
            assert!(matches!(held.admit(s, usage(100 + s, 1)), Admitted::First(_)));
            if s % 2 == 0 {
                assert!(matches!(held.admit(s, power(100 + s, 2)), Admitted::First(_)));
            }
        }
        assert_eq!(held.len(), (n as usize, n.div_ceil(2) as usize));
        let cutoff = 2 * CHUNK as i64 + 1;
        let dropped = held.evict(cutoff, second);
        assert_eq!(dropped, cutoff as usize + (cutoff as usize).div_ceil(2));
        assert!(held.get::<UsageSeen>(cutoff as u64 - 1).is_none());
        assert!(held.get::<UsageSeen>(cutoff as u64).is_some());
        // An evicted id is new again; one still held is a duplicate.
        assert!(matches!(held.admit(0, usage(100, 1)), Admitted::First(_)));
        assert!(matches!(held.admit(cutoff as u64, usage(100 + cutoff as u64, 1)), Admitted::Duplicate(_)));
        assert_eq!(held.admit(n + 1, usage(100 + cutoff as u64, 1)), Admitted::Conflict(Clash::IdReused));
        // The late record waits behind fresher ones.
        assert_eq!(held.evict(cutoff, second), 0);
        assert!(held.bytes() >= (n as usize - cutoff as usize) * size_of::<Pair>());
        let (usage_held, power_held) = held.len();
        assert_eq!(held.evict(i64::MAX, second), usage_held + power_held);
        assert_eq!(held.len(), (0, 0));
        assert!(matches!(held.admit(5, usage(105, 1)), Admitted::First(_)));
    }

    #[test]
    fn a_power_reading_is_the_same_only_with_the_same_counter() {
        let mut held = Held::default();
        let counted = |id: u64, mj: u64, epoch: u32| PowerSeen { energy_mj: mj, epoch, ..power(id, 300) };
        assert!(matches!(held.admit(7, counted(1, 5_000, 2)), Admitted::First(_)));
        assert!(matches!(held.admit(7, counted(1, 5_000, 2)), Admitted::Duplicate(_)));
        assert_eq!(held.admit(7, counted(1, 5_001, 2)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.admit(7, counted(1, 5_000, 3)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.admit(7, power(1, 300)), Admitted::Conflict(Clash::IdReused)); // without its counter
        assert_eq!(held.get::<PowerSeen>(7).map(|p| p.sample(70)), Some(Sample { second: 70, power_mw: 300, energy_mj: 5_000, epoch: 2 }));
    }

    #[test]
    fn remember_keeps_what_is_held() {
        let mut held = Held::default();
        held.remember(3, power(9, 100));
        held.remember(3, power(10, 200));
        assert_eq!(held.get::<PowerSeen>(3).map(|p| p.power_mw), Some(100));
        assert!(matches!(held.admit(3, power(9, 100)), Admitted::Duplicate(_)));
        assert_eq!(held.admit(4, power(9, 100)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.admit(3, power(9, 101)), Admitted::Conflict(Clash::IdReused));
        // A stored reading with an id held for another (gpu, second): kept, but the id still
        // names the first record; once that is evicted, the id is free.
        held.remember(5, power(9, 100));
        assert_eq!(held.get::<PowerSeen>(5).map(|p| p.power_mw), Some(100));
        assert_eq!(held.admit(5, power(9, 100)), Admitted::Conflict(Clash::IdReused));
        assert_eq!(held.evict(4, second), 1);
        assert!(matches!(held.admit(6, power(9, 100)), Admitted::First(_)));
    }
}
