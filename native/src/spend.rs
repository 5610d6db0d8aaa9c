//! A batch's spend contributions (`SpendContributions`, streams/rating/protocol.py): what its
//! rated rows add to each tenant's rented seconds and IT energy, per source partition and
//! price, leaving out what the marks say a worker before this one already counted. The rule
//! is `counts_rent` / `counts_energy` in protocol.py; the Python reference is `SpendTally`
//! (streams/rating/reference.py), held to the same dicts by tests/unit/test_native_core.py.
//!
//! Only built when the caller gives marks: without them `rate_pending` does no spend work.

use crate::hashing::FxMap;
use crate::interner::NONE;
use crate::rate::Rated;
use crate::Core;

/// (tenant, partition) → (usage next offset, power next offset), tenants as interned ids. A
/// tenant not interned has no row in the batch, so its mark is not needed.
pub(crate) type Marks = FxMap<(u32, u32), (u64, u64)>;

/// A rent contribution as Python receives it: (tenant, partition, period, gpu model, plan,
/// list price×10^6, per_s, discount×10^4, seconds).
pub(crate) type RentSpend = (String, u32, String, String, String, i64, u32, i32, i64);
/// An energy contribution: (tenant, partition, period, site, band, tariff×10^6, PUE×10^4, mJ).
pub(crate) type EnergySpend = (String, u32, String, String, String, i64, i32, i64);

/// The contributions of the rows rated so far, by (energy?, tenant, partition, period,
/// model or site, rate index): seconds of rent, or mJ of energy.
pub(crate) struct Spend {
    marks: Marks,
    rows: FxMap<(bool, u32, u32, usize, u32, usize), i64>,
}

impl Spend {
    pub(crate) fn new(marks: Marks) -> Self {
        Spend { marks, rows: FxMap::default() }
    }

    /// Count `row`, whose usage reading was read at `usage_offset` (for a rent row, its own
    /// offset), unless it has no tenant or the marks of its (tenant, partition) say it was
    /// counted: rent iff usage offset ≥ usage mark; a joined energy row unless both its
    /// offsets lie below their marks. A missing mark is (0, 0).
    pub(crate) fn add(&mut self, row: &Rated, usage_offset: u64) {
        if row.tenant == NONE {
            return; // an unjoined energy row, or a usage reading without a tenant
        }
        let (usage_mark, power_mark) = self.marks.get(&(row.tenant, row.partition)).copied().unwrap_or((0, 0));
        let counts = if row.energy {
            !(usage_offset < usage_mark && row.offset < power_mark)
        } else {
            usage_offset >= usage_mark
        };
        if counts {
            let (what, quantity) = if row.energy { (row.site, row.energy_mj) } else { (row.model, 1) };
            *self.rows.entry((row.energy, row.tenant, row.partition, row.period, what, row.rate)).or_default() += quantity;
        }
    }
}

impl Core {
    /// `marks` with tenants as interned ids (see `Marks`).
    pub(crate) fn marks(&self, marks: impl IntoIterator<Item = ((String, u32), (u64, u64))>) -> Marks {
        marks.into_iter()
            .filter_map(|((tenant, partition), mark)| Some(((self.texts.get(&tenant)?, partition), mark)))
            .collect()
    }

    /// The contributions of `spend` as Python receives them, zero quantities left out: (rent,
    /// energy). Equal rates and periods share one index (prices.rs), so each key is one value.
    pub(crate) fn spend_by_value(&self, spend: Spend) -> (Vec<RentSpend>, Vec<EnergySpend>) {
        let text = |id: u32| self.texts.text(id).to_owned();
        let (mut rent, mut energy) = (Vec::new(), Vec::new());
        for ((is_energy, tenant, partition, period, what, rate), quantity) in spend.rows {
            let period = self.period_texts[period].clone();
            if quantity == 0 {
                continue;
            } else if is_energy {
                let r = &self.energy_rates[rate];
                energy.push((text(tenant), partition, period, text(what), r.band.clone(), r.tariff_e6, r.pue_e4, quantity));
            } else {
                let r = &self.rent_rates[rate];
                rent.push((text(tenant), partition, period, text(what), r.plan.clone(), r.price_e6, r.per_s, r.discount_e4,
                           quantity));
            }
        }
        (rent, energy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rated row of tenant 1 on partition 0, read at `offset` (energy: the power reading's).
    fn row(energy: bool, tenant: u32, offset: u64, energy_mj: i64) -> Rated {
        Rated {
            energy, gpu: 0, second: 0, period: 0, tenant, instance: NONE, model: 2, site: 3, node: 4, rate: 0, util_e4: 0,
            energy_mj, measured: false, version: 0, partition: 0, offset,
        }
    }

    #[test]
    fn marks_skip_what_was_counted() {
        // marks of (tenant 1, partition 0): usage 5, power 7
        let mut spend = Spend::new(Marks::from_iter([((1, 0), (5, 7))]));
        spend.add(&row(false, 1, 4, 0), 4); // rent below the usage mark: skipped
        spend.add(&row(false, 1, 5, 0), 5); // at it: 1 s
        spend.add(&row(false, 1, 9, 0), 9); // past it: 1 s
        spend.add(&row(true, 1, 6, 300_000), 4); // both below: skipped
        spend.add(&row(true, 1, 7, 250_000), 4); // power at its mark: 250 000 mJ
        spend.add(&row(true, 1, 6, 100_000), 5); // usage at its mark: 100 000 mJ
        spend.add(&row(true, NONE, 9, 999), 9); // unjoined: never
        spend.add(&row(false, 2, 0, 0), 0); // no mark for tenant 2: (0, 0), counts
        assert_eq!(spend.rows.len(), 3);
        assert_eq!(spend.rows[&(false, 1, 0, 0, 2, 0)], 2);
        assert_eq!(spend.rows[&(true, 1, 0, 0, 3, 0)], 350_000);
        assert_eq!(spend.rows[&(false, 2, 0, 0, 2, 0)], 1);
    }
}
