//! gpubill's hot path as a Python extension: `Core` does for a batch what the Python
//! reference does — `process_batch` (streams/rating/reference_batch.py) with `QuickParser`
//! (schemas/quick_parser.py) and `Rater` (streams/rating/reference.py): validate,
//! deduplicate, attribute, price and encode the rows as ClickHouse Native blocks — with the
//! same semantics, in ≈ 3.5 µs of CPU a reading instead of ≈ 20, most of it without the GIL.
//! Python drives it from streams/rating/native.py (`NativeRater`, `process_batch_native`).
//! The Python implementation stays the reference: tests/unit/test_native_core.py feeds the
//! same batches to both and requires the same blocks. Prices come from Python (the billing
//! rules), asked once per distinct (tenant, model, second) or (site, second) and cached.
//!
//! A batch goes: `parse` (the plainly valid readings; the rest come back to Python for the
//! definition to judge, and the valid ones are handed in with `push_usage` / `push_power`)
//! → `unchecked_cards` + `mark_checked`, `lookups` + `preload_*` (what ClickHouse holds)
//! → `rate` → `evict`. This file holds the `Core` and the methods Python calls; the work is
//! in intake.rs (taking a batch in, with reading.rs and records.rs), held.rs and cards.rs
//! (what is remembered), prices.rs (prices asked of Python), rate.rs (rating) and encode.rs
//! (the blocks, with block.rs); hashing.rs and interner.rs serve them all.
//!
//! Threads: in the worker the core is used by the rating thread alone — `Pipeline.rate`
//! (streams/pipeline.py) and rules reloads run on its one-thread executor named "rating" —
//! except `forget` after a rebalance, which the event loop calls once the batches in flight
//! are written. The writer thread only inserts the encoded blocks into ClickHouse and never
//! touches the core. The event loop reads `state_size` / `state_bytes` through the Python
//! attributes `NativeRater.evict` copies after each batch, never from the core itself (it is
//! borrowed while a batch is rated).

mod block;
mod cards;
mod counters;
mod encode;
mod hashing;
mod held;
mod intake;
mod interner;
mod prices;
mod rate;
mod reading;
mod records;
mod spend;

use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use cards::Cards;
use hashing::{id_hash, key, key_second, FxMap};
use held::{Held, PowerSeen, UsageSeen};
use intake::Pending;
use interner::Interner;
use prices::{EnergyRate, Priced, RateIds, RentRate};
use reading::Kind;

#[pyclass(module = "gpubill_native")]
struct Core {
    usage_topic: String,
    power_topic: String,
    sites: HashSet<String>,
    models: HashSet<String>,
    horizon_s: i64,
    texts: Interner,
    held: Held,
    usage: Cards,
    power: Cards,
    // Per card, the newest second of a power reading ever held (evicted or not): a reading
    // newer than it has no next reading to look for (rate.rs, counters).
    newest_power: FxMap<u32, i64>,
    newest_second: i64,
    cutoff: i64,
    pending: Vec<Pending>,
    // Prices and periods, asked of Python once per distinct key (cleared with new rules):
    // Ok(index into the rates) or Err(why the reading cannot be priced). Equal rates and
    // periods share one index (`rate_ids`, `period_ids`): the spend sums (spend.rs) then
    // key on a tenant's few prices, not on every second.
    rents: FxMap<(u32, u32, i64), Priced>,
    rent_rates: Vec<RentRate>,
    energies: FxMap<(u32, i64), Priced>,
    energy_rates: Vec<EnergyRate>,
    periods: FxMap<i64, usize>,
    period_texts: Vec<String>,
    rate_ids: RateIds,
    period_ids: FxMap<String, usize>,
    // While a batch is rated: the pricing object and its error class, for the prices of
    // neighbouring seconds no reading of the batch asked for (rate.rs `energy_price`), and
    // the first unexpected error of such a call (raised once the batch is rated).
    asker: Option<(Py<PyAny>, Py<PyAny>)>,
    ask_failed: Option<PyErr>,
}

/// A stored usage reading: (gpu, second, event_id, tenant, instance, gpu_model, offset).
type StoredUsage = (String, i64, String, Option<String>, Option<String>, String, u64);
/// A stored power reading: (gpu, second, event_id, site, node, power_mw, partition, offset,
/// energy_mj, energy_epoch — '' without a counter).
type StoredPower = (String, i64, String, String, String, u32, u32, u64, u64, String);

#[pymethods]
impl Core {
    #[new]
    fn new(usage_topic: String, power_topic: String, horizon_s: i64) -> Self {
        Core {
            usage_topic, power_topic, sites: HashSet::new(), models: HashSet::new(), horizon_s,
            texts: Interner::default(), held: Held::default(), usage: Cards::default(), power: Cards::default(),
            newest_power: FxMap::default(), newest_second: 0, cutoff: 0,
            pending: Vec::new(), rents: FxMap::default(), rent_rates: Vec::new(), energies: FxMap::default(),
            energy_rates: Vec::new(), periods: FxMap::default(), period_texts: Vec::new(), rate_ids: RateIds::default(),
            period_ids: FxMap::default(), asker: None, ask_failed: None,
        }
    }

    /// Price with new rules from now on: known sites and models for validation; cached
    /// prices and periods are dropped (what was seen stays).
    fn use_rules(&mut self, sites: Vec<String>, models: Vec<String>) {
        self.sites = sites.into_iter().filter(|s| !s.is_empty() && s.chars().count() <= 256).collect();
        self.models = models.into_iter().filter(|m| !m.is_empty() && m.chars().count() <= 256).collect();
        self.reset_caches();
    }

    /// Drop everything held in memory, as a restart would (see Rater.forget).
    fn forget(&mut self) {
        self.texts = Interner::default();
        self.held = Held::default();
        self.usage = Cards::default();
        self.power = Cards::default();
        self.newest_power = FxMap::default();
        self.newest_second = 0;
        self.cutoff = 0;
        self.pending.clear();
        self.reset_caches();
    }

    #[getter]
    fn state_size(&self) -> usize {
        let (usage, power) = self.held.len();
        usage + power
    }

    /// Bytes of memory the readings held take (records and indexes).
    #[getter]
    fn state_bytes(&self) -> usize {
        self.held.bytes()
    }

    /// Start a batch: take the plainly valid single readings of `messages` (objects with
    /// topic, partition, offset and value) and of `sets`, Kafka record sets as fetched
    /// (topic, partition, bytes, first offset to read; see records.rs). Records of the sets
    /// are numbered on from `len(messages)`, in order. Returns (indexes of the messages
    /// Python must judge itself, {topic: messages}, {(topic, partition): next offset} of
    /// `messages`, the records of `sets` Python must judge as (index, topic, partition,
    /// offset, key, value, headers, timestamp), and with `timestamps` every set record's
    /// timestamp in ms). The work is `take_batch` (intake.rs), which first drops what
    /// outgrew its bound: the whole state (too many texts) or the price caches.
    #[pyo3(signature = (messages, sets, now_s, timestamps = false))]
    fn parse<'py>(&mut self, py: Python<'py>, messages: &Bound<'py, PyList>, sets: Vec<(String, u32, Bound<'py, PyBytes>, u64)>,
                  now_s: i64, timestamps: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.take_batch(py, messages, sets, now_s, timestamps)
    }

    /// A usage reading Python validated: element `elem` (1-based; 0: the whole message) of message `msg`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (msg, elem, event_id, ts, second, site, node, gpu, model, tenant, instance, util_e4, mem_mib, partition, offset))]
    fn push_usage(&mut self, msg: u32, elem: u32, event_id: &str, ts: &str, second: i64, site: &str, node: &str, gpu: &str,
                  model: &str, tenant: Option<&str>, instance: Option<&str>, util_e4: i64, mem_mib: u64, partition: u32, offset: u64) {
        let parsed = reading::Parsed {
            kind: Kind::Usage, event_id, ts, second, site, node, gpu, model, tenant, instance, util_e4, mem_mib, power_mw: 0,
            energy_mj: 0, epoch: None,
        };
        self.push(&parsed, msg, elem, partition, offset);
    }

    /// A power reading Python validated (see push_usage), with its counter when it carries one.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (msg, elem, event_id, ts, second, site, node, gpu, power_mw, partition, offset, energy_mj = None, energy_epoch = None))]
    fn push_power(&mut self, msg: u32, elem: u32, event_id: &str, ts: &str, second: i64, site: &str, node: &str, gpu: &str,
                  power_mw: i64, partition: u32, offset: u64, energy_mj: Option<u64>, energy_epoch: Option<&str>) -> PyResult<()> {
        if energy_mj.is_some() != energy_epoch.is_some() {
            return Err(PyValueError::new_err("energy_mj and energy_epoch come together"));
        }
        let parsed = reading::Parsed {
            kind: Kind::Power, event_id, ts, second, site, node, gpu, model: "", tenant: None, instance: None, util_e4: 0,
            mem_mib: 0, power_mw, energy_mj: energy_mj.unwrap_or(0), epoch: energy_epoch,
        };
        self.push(&parsed, msg, elem, partition, offset);
        Ok(())
    }

    /// Keys ClickHouse must be asked about before rating this batch: (usage keys, power
    /// keys) as lists of distinct (gpu, second). Same rule as Rater.lookups: a reading's own
    /// key and its counterpart's, and the power readings of its card within MAX_GAP_S of it
    /// (its previous and next counted readings: counters.rs).
    fn lookups<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // Without the GIL; `unsure` (per card) first: it spares most look-ups in the big maps.
        let (need_usage, need_power) = py.detach(|| {
            let mut need_usage: HashSet<u64> = HashSet::new();
            let mut need_power: HashSet<u64> = HashSet::new();
            for reading in &self.pending {
                let k = key(reading.gpu, reading.second);
                if self.usage.unsure(self.horizon_s, self.cutoff, reading.gpu, reading.second) && !self.held.contains::<UsageSeen>(k) {
                    need_usage.insert(k);
                }
                if self.power.unsure(self.horizon_s, self.cutoff, reading.gpu, reading.second) && !self.held.contains::<PowerSeen>(k) {
                    need_power.insert(k);
                }
                // Counter energy reads the card's power readings up to MAX_GAP_S on either side,
                // and a power reading rates the seconds between, each joined to its usage.
                // Unsure is monotone in the second (true up to some second, then false): the
                // window's earliest second tells whether any of it is.
                let (first, last) = (reading.second - counters::MAX_GAP_S, reading.second + counters::MAX_GAP_S);
                if self.power.unsure(self.horizon_s, self.cutoff, reading.gpu, first) {
                    for second in first..=last {
                        let k = key(reading.gpu, second);
                        if self.power.unsure(self.horizon_s, self.cutoff, reading.gpu, second) && !self.held.contains::<PowerSeen>(k) {
                            need_power.insert(k);
                        }
                    }
                }
                if reading.kind == Kind::Power && self.usage.unsure(self.horizon_s, self.cutoff, reading.gpu, first) {
                    for second in first..=last {
                        let k = key(reading.gpu, second);
                        if self.usage.unsure(self.horizon_s, self.cutoff, reading.gpu, second) && !self.held.contains::<UsageSeen>(k) {
                            need_usage.insert(k);
                        }
                    }
                }
            }
            (need_usage, need_power)
        });
        let as_list = |keys: HashSet<u64>| -> PyResult<Bound<'py, PyList>> {
            let pairs: Vec<(&str, i64)> = keys.into_iter().map(|k| (self.texts.text((k >> 32) as u32), key_second(k))).collect();
            PyList::new(py, pairs)
        };
        PyTuple::new(py, [as_list(need_usage)?, as_list(need_power)?])
    }

    /// Cards of this batch not yet checked in ClickHouse: {stream: {gpu: since}}, since a
    /// horizon before the card's oldest second in the batch (Rater.unchecked_cards).
    fn unchecked_cards(&self) -> HashMap<&'static str, HashMap<&str, i64>> {
        let mut oldest: HashMap<u32, i64> = HashMap::new();
        for reading in &self.pending {
            let at = oldest.entry(reading.gpu).or_insert(reading.second);
            *at = (*at).min(reading.second);
        }
        let unchecked = |clean: &FxMap<u32, Option<i64>>| -> HashMap<&str, i64> {
            oldest.iter().filter(|(gpu, _)| !clean.contains_key(gpu))
                .map(|(gpu, second)| (self.texts.text(*gpu), second - self.horizon_s)).collect()
        };
        HashMap::from([("usage", unchecked(&self.usage.clean)), ("power", unchecked(&self.power.clean))])
    }

    /// What ClickHouse answered for `unchecked_cards`: per stream, the cards it held readings of.
    fn mark_checked(&mut self, checked: HashMap<String, HashMap<String, i64>>, stored: HashMap<String, HashSet<String>>) -> PyResult<()> {
        let nothing = HashSet::new();
        for (stream, cards) in checked {
            let held = stored.get(&stream).unwrap_or(&nothing);
            for (gpu, since) in cards {
                let id = self.texts.id(&gpu);
                let clean = match stream.as_str() {
                    "usage" => &mut self.usage.clean,
                    "power" => &mut self.power.clean,
                    other => return Err(PyValueError::new_err(format!("no stream {other:?}"))),
                };
                clean.insert(id, (!held.contains(&gpu)).then_some(since));
            }
        }
        Ok(())
    }

    /// Stored usage readings: (gpu, second, event_id, tenant, instance, gpu_model, offset).
    fn preload_usage(&mut self, rows: Vec<StoredUsage>) {
        for (gpu, second, event_id, tenant, instance, model, offset) in rows {
            let k = key(self.texts.id(&gpu), second);
            let seen = UsageSeen {
                id: id_hash(&event_id), offset, tenant: self.texts.optional(tenant.as_deref()),
                instance: self.texts.optional(instance.as_deref()), model: self.texts.id(&model), spent: 0,
            };
            self.held.remember(k, seen); // unless a reading of (gpu, second) is held
        }
    }

    /// Stored power readings: (gpu, second, event_id, site, node, power_mw, partition, offset,
    /// energy_mj, energy_epoch — '' without a counter).
    fn preload_power(&mut self, rows: Vec<StoredPower>) {
        for (gpu, second, event_id, site, node, power_mw, partition, offset, energy_mj, epoch) in rows {
            let gpu = self.texts.id(&gpu);
            let epoch = if epoch.is_empty() { interner::NONE } else { self.texts.id(&epoch) };
            let seen = PowerSeen {
                id: id_hash(&event_id), site: self.texts.id(&site), node: self.texts.id(&node), power_mw, partition, offset,
                energy_mj: if epoch == interner::NONE { 0 } else { energy_mj }, epoch,
            };
            if self.held.remember(key(gpu, second), seen) { // unless a reading of (gpu, second) is held
                self.saw_power(gpu, second);
            }
        }
    }

    /// Deduplicate, attribute and price the batch (usage before power, each stream in
    /// message order) and encode its rows. `pricing` answers rent(tenant, model, second) →
    /// (plan, price×10^6, per_s, discount×10^4), energy(site, second) → (band,
    /// tariff×10^6, pue×10^4) and period(second) → str; an exception of class
    /// `priced_error` refuses the reading. Returns (usage block, usage rows, power block,
    /// power rows, rated block, rated rows, unallocated energy rows, conflicts, duplicates,
    /// refused, hours) — conflicts as `Conflict`s (rate.rs), refused as (message index, element,
    /// reason), hours as the (period, UTC hour) the rated rows fall in, and spend: None
    /// without `spend_marks`, else the batch's spend contributions as (rent, energy) lists of
    /// `RentSpend` / `EnergySpend` tuples (spend.rs), counted past `spend_marks`
    /// {(tenant, partition): (usage next offset, power next offset)}.
    /// Prices are asked with the GIL; the rest runs without it, beside the event loop's
    /// Kafka fetches and the writer thread's inserts.
    #[pyo3(signature = (pricing, priced_error, now_ms, spend_marks = None))]
    fn rate<'py>(&mut self, py: Python<'py>, pricing: &Bound<'py, PyAny>, priced_error: &Bound<'py, PyAny>, now_ms: i64,
                 spend_marks: Option<HashMap<(String, u32), (u64, u64)>>) -> PyResult<Bound<'py, PyTuple>> {
        self.prepare(py, pricing, priced_error)?;
        let marks = spend_marks.map(|marks| self.marks(marks));
        self.asker = Some((pricing.clone().unbind(), priced_error.clone().unbind()));
        let out = py.detach(|| self.rate_pending(now_ms, marks));
        self.asker = None;
        if let Some(err) = self.ask_failed.take() {
            return Err(err);
        }
        let items: Vec<Bound<'py, PyAny>> = vec![
            PyBytes::new(py, &out.usage_block).into_any(), out.usage_rows.into_pyobject(py)?.into_any(),
            PyBytes::new(py, &out.power_block).into_any(), out.power_rows.into_pyobject(py)?.into_any(),
            PyBytes::new(py, &out.rated_block).into_any(), out.rated_rows.into_pyobject(py)?.into_any(),
            out.unallocated.into_pyobject(py)?.into_any(), out.conflicts.into_pyobject(py)?.into_any(),
            out.duplicates.into_pyobject(py)?.into_any(), out.refused.into_pyobject(py)?.into_any(),
            out.hours.into_pyobject(py)?.into_any(), out.spend.into_pyobject(py)?.into_any(),
        ];
        PyTuple::new(py, items)
    }

    /// Forget readings older than the horizon (see Rater.evict); returns how many were dropped.
    fn evict(&mut self) -> usize {
        let slower = match self.usage.newest.min(self.power.newest) {
            0 => self.newest_second,
            slower => slower,
        };
        let cutoff = slower.max(self.newest_second - 4 * self.horizon_s) - self.horizon_s;
        self.cutoff = self.cutoff.max(cutoff);
        self.held.evict(cutoff, key_second)
    }
}

#[pymodule]
fn gpubill_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Core>()?;
    module.add("ValueError", module.py().get_type::<PyValueError>())?;
    Ok(())
}
