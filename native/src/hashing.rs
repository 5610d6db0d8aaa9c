//! The hashing of the core's maps, and the keys it hashes: FxHash for the (gpu, second)
//! keys and the small caches, and `id_hash` for event ids.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use crate::held::EventHash;

/// FxHash (as in rustc): a multiply-rotate hash, several times faster than SipHash on the
/// short keys here. Not DoS-resistant; the keys are card ids and seconds from the operator's
/// own node agents, and event ids are hashed with SipHash (`id_hash`) before they get here.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        for byte in chunks.remainder() {
            self.add(u64::from(*byte));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_i64(&mut self, n: i64) {
        self.add(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // The product's low bits depend only on the word's low bits, and hashbrown picks the
        // bucket with the low bits: a (gpu, second) key would place every card of a second
        // at the same bucket (long probe runs). Rotating brings the well-mixed high bits down.
        self.0.rotate_left(26)
    }
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// The (gpu, second) key of the maps: the card's interned id above the second's low 32 bits.
pub(crate) fn key(gpu: u32, second: i64) -> u64 {
    (u64::from(gpu) << 32) | (second as u64 & 0xffff_ffff)
}

pub(crate) fn key_second(key: u64) -> i64 {
    (key & 0xffff_ffff) as i64
}

pub(crate) fn id_hash(event_id: &str) -> EventHash {
    // SipHash with fixed keys (the same in every run), and FxHash from another seed to confirm.
    let mut first = DefaultHasher::new();
    event_id.hash(&mut first);
    let mut second = FxHasher(0x9e37_79b9_7f4a_7c15);
    second.write(event_id.as_bytes());
    second.write_usize(event_id.len());
    (first.finish(), second.finish() | 1) // never (0, 0): see held::EventHash
}
