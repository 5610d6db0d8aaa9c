//! Rating a batch, with no Python involved: deduplicate and attribute the pending readings
//! against what `Held` keeps, price them with what `prepare` (prices.rs) cached, and encode
//! the rows (encode.rs) in each table's sort order; `Core::rate` hands the result to Python.
//! The Python reference is `Rater` in streams/rating/reference.py.
//!
//! Counter energy (billing_rules/counters.py, with counters.rs): a power reading m of second
//! s changes the interval before it, (p, s], and the one after, (s, n], where p and n are the
//! card's nearest power readings held within MAX_GAP_S before and after s. Rating m writes
//! the rows of both (`rate_power`): each second's row with the version of its interval
//! (`version`), so the rows of the final intervals win whatever the arrival order; a second
//! that a valid (p, n] had measured and neither new interval measures gets a row of 0 mJ
//! ("withdrawal"). A usage reading joins the row of its second: its power reading's own row,
//! or the gap row of a valid interval around it (`rate_usage_energy`).

use crate::counters::{self, Share, MAX_GAP_S};
use crate::hashing::{id_hash, key, FxMap};
use crate::held::{Admitted, Clash, PowerSeen, Slot, UsageSeen};
use crate::interner::NONE;
use crate::reading::Kind;
use crate::spend::{EnergySpend, Marks, RentSpend, Spend};
use crate::intake::Pending;
use crate::Core;

// ReplacingMergeTree keeps the row with the highest version (see streams/rating/reference.py):
// (rank << 51) | JOINED | (OFFSET_SPAN − 1 − offset of the covering reading).
const OFFSET_SPAN: u64 = 1 << 48;
const JOINED: u64 = 1 << 50;
const RANK_SHIFT: u32 = 51;
// What of a held (gpu, second) this process counted for spend (`UsageSeen::spent`).
const SPENT_RENT: u8 = 1;
const SPENT_JOIN: u8 = 2;

/// A rated_seconds row; texts as interned ids, prices as indexes into the caches.
pub(crate) struct Rated {
    pub(crate) energy: bool,
    pub(crate) gpu: u32,
    pub(crate) second: i64,
    pub(crate) period: usize,
    pub(crate) tenant: u32,
    pub(crate) instance: u32,
    pub(crate) model: u32,
    pub(crate) site: u32,
    pub(crate) node: u32,
    pub(crate) rate: usize,
    pub(crate) util_e4: i64,
    pub(crate) energy_mj: i64,
    /// An energy row whose energy_mj came from the card's counter.
    pub(crate) measured: bool,
    pub(crate) version: u64,
    pub(crate) partition: u32,
    pub(crate) offset: u64,
}

/// (stream, gpu, second, kept event id — None when rated before this batch —, conflicting
/// event id, partition, offset, reason: `Clash::reason`)
pub(crate) type Conflict = (&'static str, String, i64, Option<String>, String, u32, u64, &'static str);

/// What `Core::rate` returns, before it becomes Python objects.
pub(crate) struct RateOutput {
    pub(crate) usage_block: Vec<u8>,
    pub(crate) usage_rows: usize,
    pub(crate) power_block: Vec<u8>,
    pub(crate) power_rows: usize,
    pub(crate) rated_block: Vec<u8>,
    pub(crate) rated_rows: usize,
    pub(crate) unallocated: usize,
    pub(crate) conflicts: Vec<Conflict>,
    pub(crate) duplicates: usize,
    pub(crate) refused: Vec<(u32, u32, String)>,
    /// The (period, UTC hour start) of every rated row, once each: the hours this batch writes.
    pub(crate) hours: Vec<(String, i64)>,
    /// With marks: the spend contributions by value, (rent, energy) (spend.rs).
    pub(crate) spend: Option<(Vec<RentSpend>, Vec<EnergySpend>)>,
}

impl Core {
    /// Rate the pending batch with the prices `prepare` cached; no Python involved. With
    /// `marks`, also count the rows' spend contributions (spend.rs); without, none of that work.
    pub(crate) fn rate_pending(&mut self, now_ms: i64, marks: Option<Marks>) -> RateOutput {
        let mut spend = marks.map(Spend::new);
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|r| (r.kind == Kind::Power, r.msg, r.elem));
        let mut raw_usage: Vec<usize> = Vec::new();
        let mut raw_power: Vec<usize> = Vec::new();
        let mut rated: Vec<Rated> = Vec::with_capacity(pending.len() + pending.len() / 8);
        let mut conflicts = Vec::new();
        let mut refused = Vec::new();
        let mut duplicates = 0usize;
        // Readings remembered in this batch, for the kept id of a conflict with one of them
        // (indexed only once a conflict needs it: conflicts are rare).
        let mut remembered: Vec<usize> = Vec::with_capacity(pending.len());
        let mut kept_here: FxMap<(bool, u64), usize> = FxMap::default();
        for (index, r) in pending.iter().enumerate() {
            let k = key(r.gpu, r.second);
            // Price first: a reading that cannot be priced moves no clock and no state.
            let price = match r.kind {
                Kind::Usage if r.tenant != NONE => Some(&self.rents[&(r.tenant, r.model, r.second)]),
                Kind::Usage => None,
                Kind::Power => Some(&self.energies[&(r.site, r.second)]),
            };
            let rate = match price {
                Some(Err(reason)) => {
                    refused.push((r.msg, r.elem, format!("cannot be priced: {reason}")));
                    continue;
                }
                Some(Ok(rate)) => Some(*rate),
                None => None,
            };
            self.newest_second = self.newest_second.max(r.second);
            let id = id_hash(&r.event_id);
            let usage = UsageSeen { id, offset: r.offset, tenant: r.tenant, instance: r.instance, model: r.model, spent: 0 };
            let power = PowerSeen {
                id, site: r.site, node: r.node, power_mw: r.power_mw as u32, partition: r.partition, offset: r.offset,
                energy_mj: r.energy_mj, epoch: r.epoch,
            };
            let (admitted, kind_name) = match r.kind {
                Kind::Usage => {
                    self.usage.first_sight(r.gpu, r.second);
                    (self.held.admit(k, usage), "usage")
                }
                Kind::Power => {
                    self.power.first_sight(r.gpu, r.second);
                    (self.held.admit(k, power), "power")
                }
            };
            let slot = match admitted {
                Admitted::Duplicate(slot) => {
                    duplicates += 1;
                    if let Some(spend) = spend.as_mut() {
                        self.spend_replay(spend, r, slot, rate);
                    }
                    continue;
                }
                Admitted::Conflict(clash) => {
                    let kept = if clash == Clash::IdReused {
                        Some(r.event_id.to_string()) // the kept reading has this very id
                    } else {
                        for i in remembered.drain(..) {
                            kept_here.insert((pending[i].kind == Kind::Power, key(pending[i].gpu, pending[i].second)), i);
                        }
                        kept_here.get(&(r.kind == Kind::Power, k)).map(|i| pending[*i].event_id.to_string())
                    };
                    conflicts.push((kind_name, self.texts.text(r.gpu).to_owned(), r.second, kept, r.event_id.to_string(),
                                    r.partition, r.offset, clash.reason()));
                    continue;
                }
                Admitted::First(slot) => slot,
            };
            remembered.push(index);
            let period = self.periods[&r.second];
            if r.kind == Kind::Usage {
                raw_usage.push(index);
                if let Some(rate) = rate {
                    let row = Rated {
                        energy: false, gpu: r.gpu, second: r.second, period, tenant: r.tenant, instance: r.instance, model: r.model,
                        site: r.site, node: r.node, rate, util_e4: r.util_e4, energy_mj: 0, measured: false,
                        version: OFFSET_SPAN - 1 - r.offset, partition: r.partition, offset: r.offset,
                    };
                    if let Some(spend) = spend.as_mut() {
                        spend.add(&row, r.offset);
                        self.held.usage_mut(slot).spent |= SPENT_RENT;
                    }
                    rated.push(row);
                }
                // The energy of this second rated before its usage: join it now. (If rules
                // swapped in since then cannot price that second at its site, no joined row
                // is written and the energy stays unallocated, as in the Python rater. It
                // takes a rules reload that withdraws the price of a second already rated.)
                self.rate_usage_energy(&mut rated, &mut spend, r.gpu, r.second, slot);
            } else {
                self.rate_power(&mut rated, &mut spend, r.gpu, r.second, &power, slot);
                raw_power.push(index);
            }
        }
        // In each table's ORDER BY order: ClickHouse then finds the block sorted and skips
        // sorting it (a third of an insert's CPU), and the rows are the same.
        // Cards are ranked once by their text, then rows sort on integers.
        let mut cards: Vec<u32> = pending.iter().map(|r| r.gpu).collect();
        cards.sort_unstable();
        cards.dedup();
        cards.sort_by(|a, b| self.texts.text(*a).cmp(self.texts.text(*b)));
        let rank: FxMap<u32, u32> = cards.iter().enumerate().map(|(rank, gpu)| (*gpu, rank as u32)).collect();
        let reading_key = |i: &usize| {
            let r = &pending[*i];
            (rank[&r.gpu], r.second, r.partition, r.offset)
        };
        raw_usage.sort_by_cached_key(reading_key);
        raw_power.sort_by_cached_key(reading_key);
        rated.sort_by_cached_key(|row| (row.energy, rank[&row.gpu], row.second));
        let mut hours: Vec<(usize, i64)> = rated.iter().map(|row| (row.period, row.second.div_euclid(3600) * 3600)).collect();
        hours.sort_unstable();
        hours.dedup();
        // In the order of the period's text, as the Python reference sorts them.
        hours.sort_by(|a, b| (self.period_texts[a.0].as_str(), a.1).cmp(&(self.period_texts[b.0].as_str(), b.1)));
        RateOutput {
            usage_block: self.readings_block(Kind::Usage, &pending, &raw_usage, now_ms),
            usage_rows: raw_usage.len(),
            power_block: self.readings_block(Kind::Power, &pending, &raw_power, now_ms),
            power_rows: raw_power.len(),
            rated_block: self.rated_block(&rated, now_ms),
            rated_rows: rated.len(),
            unallocated: rated.iter().filter(|row| row.energy && row.tenant == NONE).count(),
            conflicts,
            duplicates,
            refused,
            hours: hours.into_iter().map(|(period, hour)| (self.period_texts[period].clone(), hour)).collect(),
            spend: spend.map(|spend| self.spend_by_value(spend)),
        }
    }

    /// The spend of a duplicate that is the held reading re-read at its own offset (a batch
    /// read again after a crash: its rows are stored, its spend may not have been produced;
    /// streams/spend/ledger.py): its rent and its join, each counted once by this process,
    /// past the marks. A duplicate sent again at another offset counts nothing.
    fn spend_replay(&mut self, spend: &mut Spend, r: &Pending, slot: Slot, rate: Option<usize>) {
        let period = self.periods[&r.second];
        match r.kind {
            Kind::Usage => {
                let Some(usage) = self.held.get_at::<UsageSeen>(slot).copied() else { return };
                if usage.offset != r.offset {
                    return;
                }
                if let Some(rate) = rate.filter(|_| usage.spent & SPENT_RENT == 0) {
                    let row = Rated {
                        energy: false, gpu: r.gpu, second: r.second, period, tenant: usage.tenant, instance: usage.instance,
                        model: usage.model, site: r.site, node: r.node, rate, util_e4: 0, energy_mj: 0, measured: false, version: 0,
                        partition: r.partition, offset: r.offset,
                    };
                    spend.add(&row, r.offset);
                    self.held.usage_mut(slot).spent |= SPENT_RENT;
                }
                self.spend_join(spend, r.gpu, r.second, slot);
            }
            Kind::Power => {
                // The joins it rated: of its own second and of the seconds before it that its
                // counter measured (those of the interval it ends, as held now).
                let Some(power) = self.held.get_at::<PowerSeen>(slot).copied() else { return };
                if rate.is_none() || power.offset != r.offset || power.partition != r.partition {
                    return;
                }
                let prev = self.prev_power(r.gpu, r.second).map(|(at, seen)| seen.sample(at));
                let mut seconds = [0i64; MAX_GAP_S as usize];
                let mut count = 0;
                counters::covered(prev.as_ref(), &power.sample(r.second), |share| {
                    seconds[count] = share.second;
                    count += 1;
                });
                for second in &seconds[..count] {
                    if let Some(slot) = self.held.slot(key(r.gpu, *second)) {
                        self.spend_join(spend, r.gpu, *second, slot);
                    }
                }
            }
        }
    }

    /// Count the join of (gpu, second) — held at `slot` — as what rates its energy now
    /// (`energy_at`), unless this process counted that join already.
    fn spend_join(&mut self, spend: &mut Spend, gpu: u32, second: i64, slot: Slot) {
        let Some(usage) = self.held.get_at::<UsageSeen>(slot).copied() else { return };
        if usage.spent & SPENT_JOIN != 0 {
            return;
        }
        let Some((covering, share, rank)) = self.energy_at(gpu, second, slot) else { return };
        if let Some((row, _)) = self.energy_row(gpu, share, &covering, rank, Some(slot)) {
            spend.add(&row, usage.offset);
            self.held.usage_mut(slot).spent |= SPENT_JOIN;
        }
    }

    /// The rows a power reading (`power`, of `gpu` at `second`, just held) causes: those of
    /// the interval it ends and of the one it starts, with the withdrawals either needs.
    fn rate_power(&mut self, out: &mut Vec<Rated>, spend: &mut Option<Spend>, gpu: u32, second: i64, power: &PowerSeen,
                  slot: Slot) {
        let prev = self.prev_power(gpu, second);
        let next = self.next_power(gpu, second);
        self.saw_power(gpu, second);
        let cur = power.sample(second);
        let prev_sample = prev.map(|(at, seen)| seen.sample(at));
        let next_sample = next.map(|(at, seen)| seen.sample(at));
        // Whether the interval (prev, next] that this reading splits was measured: its gap
        // rows were written then, and the seconds neither half measures now must be withdrawn.
        let split_measured = matches!((&prev_sample, &next_sample), (Some(p), Some(n)) if counters::valid(Some(p), n));
        // 1. (prev, second]
        let rank = counters::rank(prev.map(|(at, _)| at), second);
        counters::covered(prev_sample.as_ref(), &cur, |share| {
            let at = (share.second == second).then_some(slot); // its own record: no look-up
            self.emit_at(out, spend, gpu, share, power, rank, at);
        });
        if split_measured && !counters::valid(prev_sample.as_ref(), &cur) {
            let (from, _) = prev.expect("a split interval has a start");
            for gap in from + 1..second {
                self.emit(out, spend, gpu, Share { second: gap, energy_mj: 0, measured: false }, power, rank);
            }
        }
        // 2. (second, next]
        if let (Some((at, seen)), Some(next_sample)) = (next, next_sample) {
            let rank = counters::rank(Some(second), at);
            counters::covered(Some(&cur), &next_sample, |share| self.emit(out, spend, gpu, share, &seen, rank));
            if split_measured && !counters::valid(Some(&cur), &next_sample) {
                for gap in second + 1..at {
                    self.emit(out, spend, gpu, Share { second: gap, energy_mj: 0, measured: false }, &seen, rank);
                }
            }
        }
    }

    /// The joined energy row a usage reading of `gpu` at `second` (held at `slot`) causes:
    /// that of what rates the second's energy now (`energy_at`), if anything does.
    fn rate_usage_energy(&mut self, out: &mut Vec<Rated>, spend: &mut Option<Spend>, gpu: u32, second: i64, slot: Slot) {
        if let Some((covering, share, rank)) = self.energy_at(gpu, second, slot) {
            self.emit_at(out, spend, gpu, share, &covering, rank, Some(slot));
        }
    }

    /// What rates the energy of (gpu, second) (its record at `slot`) now: (covering reading,
    /// share, rank) — its own power reading's own row, else the gap row of a measured interval
    /// around it — or None when nothing held covers it.
    fn energy_at(&self, gpu: u32, second: i64, slot: Slot) -> Option<(PowerSeen, Share, u64)> {
        if let Some(power) = self.held.get_at::<PowerSeen>(slot).copied() {
            let prev = self.prev_power(gpu, second);
            let prev_sample = prev.map(|(at, seen)| seen.sample(at));
            let mut own = None;
            counters::covered(prev_sample.as_ref(), &power.sample(second), |share| own = Some(share));
            let own = own.expect("covered ends with the reading's own second");
            return Some((power, own, counters::rank(prev.map(|(at, _)| at), second)));
        }
        let (from, prev) = self.prev_power(gpu, second)?;
        let (to, next) = self.next_power(gpu, second)?;
        let (prev_sample, next_sample) = (prev.sample(from), next.sample(to));
        let delta = counters::rise(Some(&prev_sample), &next_sample)?;
        let gap = (to - from) as u64;
        // covered(prev, next)'s share of `second`, which lies strictly between them
        let share = Share { second, energy_mj: delta / gap, measured: true };
        Some((next, share, counters::rank(Some(from), to)))
    }

    /// Write the row of `share` (joined with the usage reading of its second when one is
    /// held), counting its spend at the first joined row of its (gpu, second).
    fn emit(&mut self, out: &mut Vec<Rated>, spend: &mut Option<Spend>, gpu: u32, share: Share, covering: &PowerSeen, rank: u64) {
        self.emit_at(out, spend, gpu, share, covering, rank, None);
    }

    /// `emit`, with the record of the share's (gpu, second) when the caller knows it.
    #[allow(clippy::too_many_arguments)]
    fn emit_at(&mut self, out: &mut Vec<Rated>, spend: &mut Option<Spend>, gpu: u32, share: Share, covering: &PowerSeen,
               rank: u64, slot: Option<Slot>) {
        let Some((row, usage)) = self.energy_row(gpu, share, covering, rank, slot) else {
            return; // a second that cannot be priced gets no row
        };
        if let (Some(spend), Some((slot, usage))) = (spend.as_mut(), usage) {
            if usage.spent & SPENT_JOIN == 0 {
                spend.add(&row, usage.offset);
                self.held.usage_mut(slot).spent |= SPENT_JOIN;
            }
        }
        out.push(row);
    }

    /// The energy row of `share`, covered by the power reading `covering` in an interval of
    /// `rank`, with the usage reading held for its (gpu, second) (where, and what) — or None
    /// when its second cannot be priced at the covering reading's site.
    fn energy_row(&mut self, gpu: u32, share: Share, covering: &PowerSeen, rank: u64, slot: Option<Slot>)
                  -> Option<(Rated, Option<(Slot, UsageSeen)>)> {
        let rate = self.energy_price(covering.site, share.second)?;
        let period = self.period_index(share.second)?;
        let slot = slot.or_else(|| self.held.slot(key(gpu, share.second)));
        let usage = slot.and_then(|slot| Some((slot, *self.held.get_at::<UsageSeen>(slot)?)));
        let mut version = (rank << RANK_SHIFT) | (OFFSET_SPAN - 1 - covering.offset);
        let (tenant, instance, model) = match usage {
            Some((_, usage)) => {
                version |= JOINED;
                (usage.tenant, usage.instance, usage.model)
            }
            None => (NONE, NONE, NONE),
        };
        let row = Rated {
            energy: true, gpu, second: share.second, period, tenant, instance, model, site: covering.site, node: covering.node,
            rate, util_e4: 0, energy_mj: share.energy_mj as i64, measured: share.measured, version,
            partition: covering.partition, offset: covering.offset,
        };
        Some((row, usage))
    }

    /// The card's nearest power reading held in [second − MAX_GAP_S, second − 1].
    pub(crate) fn prev_power(&self, gpu: u32, second: i64) -> Option<(i64, PowerSeen)> {
        let newest = *self.newest_power.get(&gpu)?;
        let mut at = (second - 1).min(newest);
        while at >= second - MAX_GAP_S {
            if let Some(seen) = self.held.get::<PowerSeen>(key(gpu, at)) {
                return Some((at, *seen));
            }
            at -= 1;
        }
        None
    }

    /// The card's nearest power reading held in [second + 1, second + MAX_GAP_S]; an in-order
    /// reading (the newest of its card) looks for none.
    pub(crate) fn next_power(&self, gpu: u32, second: i64) -> Option<(i64, PowerSeen)> {
        let newest = *self.newest_power.get(&gpu)?;
        (second + 1..=(second + MAX_GAP_S).min(newest))
            .find_map(|at| self.held.get::<PowerSeen>(key(gpu, at)).map(|seen| (at, *seen)))
    }

    /// A power reading of `gpu` at `second` is held now.
    pub(crate) fn saw_power(&mut self, gpu: u32, second: i64) {
        let newest = self.newest_power.entry(gpu).or_insert(second);
        *newest = (*newest).max(second);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prices::EnergyRate;

    const GPU: u32 = 0;
    const EPOCH: u32 = 1;
    const OTHER_EPOCH: u32 = 2;
    const T: i64 = 1_772_323_200;

    /// A core whose every second of T … T + 100 is priced (one rate, one period) at site 0.
    fn core() -> Core {
        let mut core = Core::new("u".into(), "p".into(), 900);
        core.energy_rates.push(EnergyRate { band: "flat".into(), tariff_e6: 330_000, pue_e4: 11_200 });
        core.period_texts.push("2026-03".into());
        for second in T..T + 100 {
            core.energies.insert((0, second), Ok(0));
            core.periods.insert(second, 0);
        }
        core
    }

    /// (second − T, mJ, measured, rank, joined, covering offset) of each row.
    type Row = (i64, i64, bool, u64, bool, u64);

    fn rows(out: Vec<Rated>) -> Vec<Row> {
        out.into_iter().map(|r| {
            let rank = r.version >> RANK_SHIFT;
            let joined = r.version & JOINED != 0;
            assert_eq!(r.version & (OFFSET_SPAN - 1), OFFSET_SPAN - 1 - r.offset);
            (r.second - T, r.energy_mj, r.measured, rank, joined, r.offset)
        }).collect()
    }

    /// Rate a power reading of GPU at T + `at` drawing `mw`, with counter (mJ, epoch), read at `offset`.
    fn power(core: &mut Core, at: i64, mw: u32, counter: Option<(u64, u32)>, offset: u64) -> Vec<Row> {
        let (energy_mj, epoch) = counter.unwrap_or((0, NONE));
        let seen = PowerSeen { id: (offset + 1, offset + 1), offset, site: 0, node: 0, power_mw: mw, partition: 0, energy_mj, epoch };
        let Admitted::First(slot) = core.held.admit(key(GPU, T + at), seen) else { panic!("not first") };
        let mut out = Vec::new();
        core.rate_power(&mut out, &mut None, GPU, T + at, &seen, slot);
        rows(out)
    }

    fn usage(core: &mut Core, at: i64, offset: u64) -> Vec<Row> {
        let seen = UsageSeen { id: (offset + 1000, 1), offset, tenant: 7, instance: NONE, model: 8, spent: 0 };
        let Admitted::First(slot) = core.held.admit(key(GPU, T + at), seen) else { panic!("not first") };
        let mut out = Vec::new();
        core.rate_usage_energy(&mut out, &mut None, GPU, T + at, slot);
        rows(out)
    }

    #[test]
    fn in_order_readings_measure_their_seconds_and_the_gaps() {
        let mut core = core();
        // the first reading: no previous one, its power_w, estimated, rank 0
        assert_eq!(power(&mut core, 0, 250_000, Some((1_000_000, EPOCH)), 0), vec![(0, 250_000, false, 0, false, 0)]);
        // a second later: 1,300,000 − 1,000,000 = 300,000 mJ measured, rank 11 − 1 = 10
        assert_eq!(power(&mut core, 1, 250_000, Some((1_300_000, EPOCH)), 1), vec![(1, 300_000, true, 10, false, 1)]);
        // two seconds later: 600,001 mJ over 2 s: 300,000 to T+2, 300,001 to T+3, rank 9, both covered by T+3's reading
        assert_eq!(power(&mut core, 3, 250_000, Some((1_900_001, EPOCH)), 2),
                   vec![(2, 300_000, true, 9, false, 2), (3, 300_001, true, 9, false, 2)]);
        // another epoch: estimated, and the second between gets nothing
        assert_eq!(power(&mut core, 5, 400_000, Some((7, OTHER_EPOCH)), 3), vec![(5, 400_000, false, 9, false, 3)]);
        // 11 s later: too far, rank 0
        assert_eq!(power(&mut core, 16, 500_000, Some((8, OTHER_EPOCH)), 4), vec![(16, 500_000, false, 0, false, 4)]);
        // a jump beyond 5 kW × 1 s, then a reading without a counter
        assert_eq!(power(&mut core, 17, 1, Some((5_000_009, OTHER_EPOCH)), 5), vec![(17, 1, false, 10, false, 5)]);
        assert_eq!(power(&mut core, 18, 2, None, 6), vec![(18, 2, false, 10, false, 6)]);
        assert_eq!(power(&mut core, 19, 3, Some((5_000_010, OTHER_EPOCH)), 7), vec![(19, 3, false, 10, false, 7)]);
    }

    #[test]
    fn a_late_reading_splits_the_interval_and_withdraws_what_it_no_longer_measures() {
        let mut core = core();
        power(&mut core, 0, 250_000, Some((1_000_000, EPOCH)), 0);
        // (T, T+3]: 900,001 mJ over 3 s, rank 8
        assert_eq!(power(&mut core, 3, 250_000, Some((1_900_001, EPOCH)), 1),
                   vec![(1, 300_000, true, 8, false, 1), (2, 300_000, true, 8, false, 1), (3, 300_001, true, 8, false, 1)]);
        // T+2 comes late with a reset counter: (T, T+2] is not measured (the counter fell) —
        // T+2 its power_w, T+1 withdrawn (0 mJ), both rank 9 — and (T+2, T+3] is: 1,900,001 − 5
        // = 1,899,996 mJ to T+3, rank 10, covered by T+3's reading still
        assert_eq!(power(&mut core, 2, 123_000, Some((5, EPOCH)), 2),
                   vec![(2, 123_000, false, 9, false, 2), (1, 0, false, 9, false, 2), (3, 1_899_996, true, 10, false, 1)]);
    }

    #[test]
    fn a_late_reading_inside_a_measured_interval_refines_both_halves() {
        let mut core = core();
        power(&mut core, 10, 0, Some((0, EPOCH)), 0);
        power(&mut core, 14, 0, Some((4_000_003, EPOCH)), 1); // 1,000,000 × 3 + 1,000,003
        // T+11 late: (T+10, T+11] 1,500,000 rank 10; (T+11, T+14] 2,500,003 over 3 s rank 8
        assert_eq!(power(&mut core, 11, 0, Some((1_500_000, EPOCH)), 2), vec![
            (11, 1_500_000, true, 10, false, 2),
            (12, 833_334, true, 8, false, 1), (13, 833_334, true, 8, false, 1), (14, 833_335, true, 8, false, 1),
        ]);
        // a reading without a counter at T+12: (T+11, T+12] and (T+12, T+14] are not measured:
        // T+12 its power_w (rank 10), T+14 its power_w (0 W) and T+13 withdrawn (rank 9)
        assert_eq!(power(&mut core, 12, 42, None, 3), vec![
            (12, 42, false, 10, false, 3), (14, 0, false, 9, false, 1), (13, 0, false, 9, false, 1),
        ]);
    }

    #[test]
    fn usage_joins_its_power_reading_or_the_gap_row_around_it() {
        let mut core = core();
        power(&mut core, 20, 0, Some((10, EPOCH)), 0);
        power(&mut core, 24, 0, Some((410, EPOCH)), 1); // 100 mJ a second
        // a gap second: the row of (T+20, T+24], covered by T+24's reading, joined
        assert_eq!(usage(&mut core, 22, 5), vec![(22, 100, true, 7, true, 1)]);
        // a reading's own second: its own row, joined
        assert_eq!(usage(&mut core, 24, 6), vec![(24, 100, true, 7, true, 1)]);
        assert_eq!(usage(&mut core, 20, 7), vec![(20, 0, false, 0, true, 0)]);
        // after the interval, or with nothing measured around it: no row
        assert_eq!(usage(&mut core, 25, 8), vec![]);
        power(&mut core, 30, 0, Some((0, EPOCH)), 2);
        power(&mut core, 32, 0, Some((0, OTHER_EPOCH)), 3);
        assert_eq!(usage(&mut core, 31, 9), vec![]);
        // a late power reading whose interval covers a joined second writes it joined
        assert_eq!(power(&mut core, 23, 0, Some((310, EPOCH)), 4), vec![
            (21, 100, true, 8, false, 4), (22, 100, true, 8, true, 4), (23, 100, true, 8, false, 4),
            (24, 100, true, 10, true, 1),
        ]);
    }

    #[test]
    fn neighbours_are_found_within_ten_seconds_and_not_past_the_newest() {
        let mut core = core();
        power(&mut core, 40, 0, None, 0);
        assert_eq!(core.prev_power(GPU, T + 50).map(|(at, _)| at - T), Some(40));
        assert!(core.prev_power(GPU, T + 51).is_none());
        assert_eq!(core.next_power(GPU, T + 30).map(|(at, _)| at - T), Some(40));
        assert!(core.next_power(GPU, T + 29).is_none());
        assert!(core.next_power(GPU, T + 40).is_none());
        assert!(core.prev_power(1, T + 41).is_none()); // another card
    }
}
