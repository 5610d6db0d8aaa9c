//! Prices and periods for the core, asked of the billing rules (Python, through the
//! `pricing` object of `Core::rate`: `NativePricing` in streams/rating/native.py) once per
//! distinct (tenant, model, second), (site, second) or second, and cached on the `Core`
//! until new rules come (`Core::use_rules`) or the caches grow past their bound.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash};

use pyo3::prelude::*;

use crate::hashing::{key, FxHasher, FxMap};
use crate::held::PowerSeen;
use crate::interner::NONE;
use crate::reading::Kind;
use crate::Core;

/// A rent price as the rated_seconds columns hold it: price×10^6, discount×10^4.
pub(crate) struct RentRate {
    pub(crate) plan: String,
    pub(crate) price_e6: i64,
    pub(crate) per_s: u32,
    pub(crate) discount_e4: i32,
}

/// An energy price as the rated_seconds columns hold it: tariff×10^6, PUE×10^4.
pub(crate) struct EnergyRate {
    pub(crate) band: String,
    pub(crate) tariff_e6: i64,
    pub(crate) pue_e4: i32,
}

/// The outcome of pricing: Ok(index into a cache) or Err(the reason it cannot be priced).
pub(crate) type Priced = Result<usize, String>;

/// The index of each distinct rent and energy rate by value, so equal rates share one.
#[derive(Default)]
pub(crate) struct RateIds {
    rents: FxMap<(String, i64, u32, i32), usize>,
    energies: FxMap<(String, i64, i32), usize>,
}

impl Core {
    pub(crate) fn reset_caches(&mut self) {
        self.rents.clear();
        self.rent_rates.clear();
        self.energies.clear();
        self.energy_rates.clear();
        self.periods.clear();
        self.period_texts.clear();
        self.rate_ids = RateIds::default();
        self.period_ids.clear();
    }

    fn priced<'py>(py: Python<'py>, result: PyResult<Bound<'py, PyAny>>, priced_error: &Bound<'py, PyAny>) -> PyResult<Result<Bound<'py, PyAny>, String>> {
        match result {
            Ok(value) => Ok(Ok(value)),
            Err(err) if err.is_instance(py, priced_error) => Ok(Err(err.value(py).str()?.to_string())),
            Err(err) => Err(err),
        }
    }

    fn ask_rent(&mut self, py: Python<'_>, pricing: &Bound<'_, PyAny>, priced_error: &Bound<'_, PyAny>, tenant: u32, model: u32, second: i64) -> PyResult<()> {
        if self.rents.contains_key(&(tenant, model, second)) {
            return Ok(());
        }
        let call = pricing.call_method1("rent", (self.texts.text(tenant), self.texts.text(model), second));
        let priced = match Self::priced(py, call, priced_error)? {
            Ok(rate) => {
                let (plan, price_e6, per_s, discount_e4): (String, i64, u32, i32) = rate.extract()?;
                let rates = &mut self.rent_rates;
                Ok(*self.rate_ids.rents.entry((plan.clone(), price_e6, per_s, discount_e4)).or_insert_with(|| {
                    rates.push(RentRate { plan, price_e6, per_s, discount_e4 });
                    rates.len() - 1
                }))
            }
            Err(reason) => Err(reason),
        };
        self.rents.insert((tenant, model, second), priced);
        Ok(())
    }

    fn ask_energy(&mut self, py: Python<'_>, pricing: &Bound<'_, PyAny>, priced_error: &Bound<'_, PyAny>, site: u32, second: i64) -> PyResult<()> {
        if self.energies.contains_key(&(site, second)) {
            return Ok(());
        }
        let call = pricing.call_method1("energy", (self.texts.text(site), second));
        let priced = match Self::priced(py, call, priced_error)? {
            Ok(rate) => {
                let (band, tariff_e6, pue_e4): (String, i64, i32) = rate.extract()?;
                let rates = &mut self.energy_rates;
                Ok(*self.rate_ids.energies.entry((band.clone(), tariff_e6, pue_e4)).or_insert_with(|| {
                    rates.push(EnergyRate { band, tariff_e6, pue_e4 });
                    rates.len() - 1
                }))
            }
            Err(reason) => Err(reason),
        };
        self.energies.insert((site, second), priced);
        Ok(())
    }

    fn ask_period(&mut self, pricing: &Bound<'_, PyAny>, second: i64) -> PyResult<()> {
        if !self.periods.contains_key(&second) {
            let period: String = pricing.call_method1("period", (second,))?.extract()?;
            let texts = &mut self.period_texts;
            let index = *self.period_ids.entry(period.clone()).or_insert_with(|| {
                texts.push(period);
                texts.len() - 1
            });
            self.periods.insert(second, index);
        }
        Ok(())
    }

    /// The energy price of `site` at `second` (an index into `energy_rates`), or None when it
    /// cannot be priced. Asked of Python here, with the GIL taken again, only when no reading
    /// of the batch asked for it (`prepare`): a neighbouring second a counter's interval
    /// covers (rate.rs), or a price the caches dropped. An unexpected Python error is kept in
    /// `ask_failed` (raised by `Core::rate`) and the second is not priced.
    pub(crate) fn energy_price(&mut self, site: u32, second: i64) -> Option<usize> {
        if !self.energies.contains_key(&(site, second)) {
            self.ask_lazily(|core, py, pricing, priced_error| core.ask_energy(py, pricing, priced_error, site, second));
        }
        self.energies.get(&(site, second)).and_then(|priced| priced.as_ref().ok().copied())
    }

    /// The period of `second` (an index into `period_texts`), asked as `energy_price` asks.
    pub(crate) fn period_index(&mut self, second: i64) -> Option<usize> {
        if !self.periods.contains_key(&second) {
            self.ask_lazily(|core, _, pricing, _| core.ask_period(pricing, second));
        }
        self.periods.get(&second).copied()
    }

    fn ask_lazily(&mut self, ask: impl FnOnce(&mut Self, Python<'_>, &Bound<'_, PyAny>, &Bound<'_, PyAny>) -> PyResult<()>) {
        let Some((pricing, priced_error)) = self.asker.take() else {
            return; // not rating: nothing to ask
        };
        Python::attach(|py| {
            if let Err(err) = ask(self, py, pricing.bind(py), priced_error.bind(py)) {
                self.ask_failed.get_or_insert(err);
            }
        });
        self.asker = Some((pricing, priced_error));
    }

    /// Every price and period rating the pending batch can ask for, cached: what is missing
    /// is found without the GIL, then asked of the rules (Python) with it.
    pub(crate) fn prepare(&mut self, py: Python<'_>, pricing: &Bound<'_, PyAny>, priced_error: &Bound<'_, PyAny>) -> PyResult<()> {
        let (periods, rents, energies) = py.detach(|| self.missing_prices());
        for second in periods {
            self.ask_period(pricing, second)?;
        }
        for (tenant, model, second) in rents {
            self.ask_rent(py, pricing, priced_error, tenant, model, second)?;
        }
        for (site, second) in energies {
            self.ask_energy(py, pricing, priced_error, site, second)?;
        }
        Ok(())
    }

    /// The periods, rents (tenant, model, second) and energy prices (site, second) the
    /// pending batch needs and the caches lack, each once, in the batch's order.
    #[allow(clippy::type_complexity)]
    fn missing_prices(&self) -> (Vec<i64>, Vec<(u32, u32, i64)>, Vec<(u32, i64)>) {
        fn once<T: Copy + Eq + Hash>(out: &mut Vec<T>, seen: &mut HashSet<T, BuildHasherDefault<FxHasher>>, item: T) {
            if seen.insert(item) {
                out.push(item);
            }
        }
        let (mut periods, mut rents, mut energies) = (Vec::new(), Vec::new(), Vec::new());
        let (mut seen_periods, mut seen_rents, mut seen_energies) = (HashSet::default(), HashSet::default(), HashSet::default());
        for r in &self.pending {
            if !self.periods.contains_key(&r.second) {
                once(&mut periods, &mut seen_periods, r.second);
            }
            match r.kind {
                Kind::Usage => {
                    if r.tenant != NONE && !self.rents.contains_key(&(r.tenant, r.model, r.second)) {
                        once(&mut rents, &mut seen_rents, (r.tenant, r.model, r.second));
                    }
                    // A usage reading may join a power reading rated in an earlier batch.
                    if let Some(power) = self.held.get::<PowerSeen>(key(r.gpu, r.second)) {
                        if !self.energies.contains_key(&(power.site, r.second)) {
                            once(&mut energies, &mut seen_energies, (power.site, r.second));
                        }
                    }
                }
                Kind::Power => {
                    if !self.energies.contains_key(&(r.site, r.second)) {
                        once(&mut energies, &mut seen_energies, (r.site, r.second));
                    }
                }
            }
        }
        (periods, rents, energies)
    }
}
