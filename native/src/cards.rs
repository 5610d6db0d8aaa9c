//! What the core knows of one stream's cards, beside the readings `Held` keeps: when each
//! card was first seen and whether ClickHouse was asked about it — what decides whether a
//! (gpu, second) must be looked up in ClickHouse before rating (`Rater._unsure` in
//! streams/rating/reference.py).

use crate::hashing::FxMap;

#[derive(Default)]
pub(crate) struct Cards {
    pub(crate) newest: i64,
    pub(crate) first: FxMap<u32, i64>,
    // Per card, once ClickHouse was asked: the second from which it held none of the card's
    // readings then, or None when it held some (see Rater.unchecked_cards).
    pub(crate) clean: FxMap<u32, Option<i64>>,
}

impl Cards {
    pub(crate) fn first_sight(&mut self, gpu: u32, second: i64) {
        self.first.entry(gpu).or_insert(second);
        if second > self.newest {
            self.newest = second;
        }
    }

    /// Could another process hold a reading of this stream for (gpu, second) that memory
    /// lacks? (Rater._unsure)
    pub(crate) fn unsure(&self, horizon_s: i64, cutoff: i64, gpu: u32, second: i64) -> bool {
        if let Some(Some(clean)) = self.clean.get(&gpu) {
            if second >= *clean && second >= cutoff {
                return false;
            }
        }
        match self.first.get(&gpu) {
            None => true,
            Some(first) => second <= first + 2 * horizon_s || second < cutoff,
        }
    }
}
