//! Rating a batch, with no Python involved: deduplicate and attribute the pending readings
//! against what `Held` keeps, price them with what `prepare` (prices.rs) cached, and encode
//! the rows (encode.rs) in each table's sort order; `Core::rate` hands the result to Python.
//! The Python reference is `Rater` in streams/rating/reference.py.

use crate::hashing::{id_hash, key, key_second, FxMap};
use crate::held::{Admitted, Clash, PowerSeen, Slot, UsageSeen};
use crate::interner::NONE;
use crate::reading::Kind;
use crate::spend::{EnergySpend, Marks, RentSpend, Spend};
use crate::intake::Pending;
use crate::Core;

// ReplacingMergeTree keeps the row with the highest version (see streams/rating/reference.py).
const OFFSET_SPAN: u64 = 1 << 48;
const JOINED: u64 = 1 << 50;
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
            let power = PowerSeen { id, site: r.site, node: r.node, power_mw: r.power_mw as u32, partition: r.partition, offset: r.offset };
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
                        self.spend_replay(spend, r, k, slot, rate);
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
                        site: r.site, node: r.node, rate, util_e4: r.util_e4, energy_mj: 0, version: OFFSET_SPAN - 1 - r.offset,
                        partition: r.partition, offset: r.offset,
                    };
                    if let Some(spend) = spend.as_mut() {
                        spend.add(&row, r.offset);
                        self.held.usage_mut(slot).spent |= SPENT_RENT;
                    }
                    rated.push(row);
                }
                if let Some(power) = self.held.get_at::<PowerSeen>(slot) {
                    // The power of this second was rated before its usage: join it now. (If
                    // rules swapped in since then cannot price that second at its site, no
                    // joined row is written and the energy stays unallocated; the Python
                    // rater would refuse the usage reading instead. It takes a rules reload
                    // that withdraws the price of a second already rated.)
                    if let Some(Ok(rate)) = self.energies.get(&(power.site, r.second)) {
                        let row = self.energy_row(k, power, Some(&usage), period, *rate);
                        if let Some(spend) = spend.as_mut() {
                            spend.add(&row, r.offset);
                            self.held.usage_mut(slot).spent |= SPENT_JOIN;
                        }
                        rated.push(row);
                    }
                }
            } else {
                let rate = rate.expect("power readings are priced");
                let usage = self.held.get_at::<UsageSeen>(slot).copied();
                let row = self.energy_row(k, &power, usage.as_ref(), period, rate);
                if let Some(spend) = spend.as_mut() {
                    spend.add(&row, usage.map_or(0, |usage| usage.offset));
                    if usage.is_some() {
                        self.held.usage_mut(slot).spent |= SPENT_JOIN;
                    }
                }
                rated.push(row);
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
    fn spend_replay(&mut self, spend: &mut Spend, r: &Pending, k: u64, slot: Slot, rate: Option<usize>) {
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
                        model: usage.model, site: r.site, node: r.node, rate, util_e4: 0, energy_mj: 0, version: 0,
                        partition: r.partition, offset: r.offset,
                    };
                    spend.add(&row, r.offset);
                    self.held.usage_mut(slot).spent |= SPENT_RENT;
                }
                if let Some(power) = self.held.get_at::<PowerSeen>(slot).copied() {
                    if let Some(Ok(rate)) = self.energies.get(&(power.site, r.second)).cloned() {
                        self.spend_join(spend, k, slot, &power, period, rate);
                    }
                }
            }
            Kind::Power => {
                let Some(power) = self.held.get_at::<PowerSeen>(slot).copied() else { return };
                if let Some(rate) = rate.filter(|_| power.offset == r.offset && power.partition == r.partition) {
                    self.spend_join(spend, k, slot, &power, period, rate);
                }
            }
        }
    }

    /// Count the join held at `slot` unless this process counted it already.
    fn spend_join(&mut self, spend: &mut Spend, k: u64, slot: Slot, power: &PowerSeen, period: usize, rate: usize) {
        let Some(usage) = self.held.get_at::<UsageSeen>(slot).copied() else { return };
        if usage.spent & SPENT_JOIN == 0 {
            spend.add(&self.energy_row(k, power, Some(&usage), period, rate), usage.offset);
            self.held.usage_mut(slot).spent |= SPENT_JOIN;
        }
    }

    fn energy_row(&self, power_key: u64, power: &PowerSeen, usage: Option<&UsageSeen>, period: usize, rate: usize) -> Rated {
        let mut version = OFFSET_SPAN - 1 - power.offset;
        let (tenant, instance, model) = match usage {
            Some(usage) => {
                version += JOINED;
                (usage.tenant, usage.instance, usage.model)
            }
            None => (NONE, NONE, NONE),
        };
        Rated {
            energy: true, gpu: (power_key >> 32) as u32, second: key_second(power_key), period, tenant, instance, model,
            site: power.site, node: power.node, rate, util_e4: 0, energy_mj: i64::from(power.power_mw), version,
            partition: power.partition, offset: power.offset,
        }
    }
}
