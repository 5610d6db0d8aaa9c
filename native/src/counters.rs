//! Energy from the cards' own counters, as billing_rules/counters.py defines it (that module
//! is the definition; this is the same arithmetic on integers, for rate.rs): the IT energy of
//! the seconds a power reading covers is the counter's rise since the card's previous counted
//! reading when that carries a counter of the same epoch, lies at most `MAX_GAP_S` seconds
//! earlier and the rise is within what 5,000 W can draw; split evenly in whole mJ over
//! (prev, cur], the remainder to the last. Otherwise the reading's own second falls back to
//! its power_mw × 1 s (estimated) and the seconds between get nothing.

use crate::interner::NONE;

pub const MAX_GAP_S: i64 = 10;
pub const MAX_MJ_PER_S: u64 = 5_000_000;

/// One counted power reading of a card: its second, its draw in whole mW and its counter
/// (`epoch` interned; `NONE` when the reading carries no counter, `energy_mj` then 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub second: i64,
    pub power_mw: u32,
    pub energy_mj: u64,
    pub epoch: u32,
}

/// The energy of one second: `energy_mj`, from the counter (`measured`) or from power_w.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub second: i64,
    pub energy_mj: u64,
    pub measured: bool,
}

/// The counter's rise from `prev` to `cur` when it measures the seconds between, else None
/// (counters.rise).
pub fn rise(prev: Option<&Sample>, cur: &Sample) -> Option<u64> {
    let prev = prev?;
    if prev.epoch == NONE || cur.epoch == NONE || prev.epoch != cur.epoch {
        return None;
    }
    let gap = cur.second - prev.second;
    if !(0 < gap && gap <= MAX_GAP_S) {
        return None;
    }
    let delta = cur.energy_mj.checked_sub(prev.energy_mj)?;
    (delta <= MAX_MJ_PER_S * gap as u64).then_some(delta)
}

/// Whether the counter measures (prev, cur] (counters.rise is not None).
pub fn valid(prev: Option<&Sample>, cur: &Sample) -> bool {
    rise(prev, cur).is_some()
}

/// How much is known of a second covered by (prev_second, second]: 0 without a previous
/// reading within `MAX_GAP_S`, else 11 − gap (counters.rank).
pub fn rank(prev_second: Option<i64>, second: i64) -> u64 {
    match prev_second {
        Some(prev) if second - prev <= MAX_GAP_S => (MAX_GAP_S + 1 - (second - prev)) as u64,
        _ => 0,
    }
}

/// The shares of the seconds `cur` covers given its previous reading, oldest first, the
/// last `cur`'s own (counters.covered), handed to `each` (no allocation on the hot path).
pub fn covered(prev: Option<&Sample>, cur: &Sample, mut each: impl FnMut(Share)) {
    match (prev, rise(prev, cur)) {
        (Some(prev), Some(delta)) => {
            let gap = (cur.second - prev.second) as u64;
            let (part, rest) = (delta / gap, delta % gap);
            for second in prev.second + 1..cur.second {
                each(Share { second, energy_mj: part, measured: true });
            }
            each(Share { second: cur.second, energy_mj: part + rest, measured: true });
        }
        _ => each(Share { second: cur.second, energy_mj: u64::from(cur.power_mw), measured: false }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(second: i64, power_mw: u32, energy_mj: u64, epoch: u32) -> Sample {
        Sample { second, power_mw, energy_mj, epoch }
    }

    fn shares(prev: Option<&Sample>, cur: &Sample) -> Vec<(i64, u64, bool)> {
        let mut out = Vec::new();
        covered(prev, cur, |s| out.push((s.second, s.energy_mj, s.measured)));
        out
    }

    #[test]
    fn a_rise_is_split_evenly_the_remainder_to_the_last() {
        let prev = counted(100, 300_000, 1_000_000, 1);
        // 3 s, 1,000,001 mJ: 333,333 each, the last 333,333 + 2
        assert_eq!(shares(Some(&prev), &counted(103, 1, 2_000_001, 1)),
                   vec![(101, 333_333, true), (102, 333_333, true), (103, 333_335, true)]);
        // 1 s: the whole rise on the reading's own second, whatever power_w says
        assert_eq!(shares(Some(&prev), &counted(101, 999, 1_250_000, 1)), vec![(101, 250_000, true)]);
        // no rise: 0 mJ measured
        assert_eq!(shares(Some(&prev), &counted(102, 999, 1_000_000, 1)), vec![(101, 0, true), (102, 0, true)]);
    }

    #[test]
    fn resets_jumps_long_gaps_and_missing_counters_fall_back_to_power() {
        let prev = counted(100, 300_000, 1_000_000, 1);
        let estimated = |second| vec![(second, 777, false)];
        assert_eq!(shares(None, &counted(101, 777, 2_000_000, 1)), estimated(101));
        assert_eq!(shares(Some(&prev), &counted(101, 777, 999_999, 1)), estimated(101)); // the counter fell
        assert_eq!(shares(Some(&prev), &counted(101, 777, 1_500_000, 2)), estimated(101)); // another epoch
        assert_eq!(shares(Some(&prev), &counted(101, 777, 6_000_001, 1)), estimated(101)); // > 5 kW × 1 s
        assert_eq!(shares(Some(&prev), &counted(102, 777, 11_000_000, 1)), vec![(101, 5_000_000, true), (102, 5_000_000, true)]);
        assert_eq!(shares(Some(&prev), &counted(111, 777, 1_000_000, 1)), estimated(111)); // 11 s
        assert_eq!(shares(Some(&prev), &counted(110, 777, 1_000_010, 1)).len(), 10); // 10 s: measured
        assert_eq!(shares(Some(&prev), &counted(101, 777, 0, NONE)), estimated(101)); // no counter now
        let uncounted = counted(100, 300_000, 0, NONE);
        assert_eq!(shares(Some(&uncounted), &counted(101, 777, 5, 1)), estimated(101)); // none before
    }

    #[test]
    fn ranks_grow_as_the_interval_shrinks() {
        assert_eq!(rank(None, 100), 0);
        assert_eq!(rank(Some(89), 100), 0);
        assert_eq!(rank(Some(90), 100), 1);
        assert_eq!(rank(Some(99), 100), 10);
        assert!(valid(Some(&counted(0, 0, 0, 3)), &counted(10, 0, 50_000_000, 3)));
        assert!(!valid(Some(&counted(0, 0, 0, 3)), &counted(10, 0, 50_000_001, 3)));
        assert!(!valid(Some(&counted(5, 0, 0, 3)), &counted(5, 0, 0, 3)));
    }
}
