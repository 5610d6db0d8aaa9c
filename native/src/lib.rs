//! gpubill's hot path as a Python extension: `Core` does for a batch what
//! `streams.pipeline.process_batch` does with `schemas.fast.QuickParser` and
//! `streams.rating.Rater` — validate, deduplicate, attribute, price and encode the rows as
//! ClickHouse Native blocks — with the same semantics, in ≈ 3.5 µs of CPU a reading instead
//! of ≈ 20, most of it without the GIL. The Python implementation stays the reference:
//! tests/unit/test_native_core.py feeds the same batches to both and requires the same
//! blocks. Prices come from Python (the billing rules), asked once per distinct (tenant,
//! model, second) or (site, second) and cached.
//!
//! A batch goes: `parse` (the plainly valid readings; the rest come back to Python for the
//! definition to judge, and the valid ones are handed in with `push_usage` / `push_power`)
//! → `unchecked_cards` + `mark_checked`, `lookups` + `preload_*` (what ClickHouse holds)
//! → `rate` → `evict`. The core is used by one thread at a time (the sink's).

mod block;
mod held;
mod reading;
mod records;

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use block::Block;
use held::{Admitted, EventHash, Held, PowerSeen, UsageSeen};
use reading::Kind;

const NONE: u32 = u32::MAX; // no tenant / instance / model
// ReplacingMergeTree keeps the row with the highest version (see streams/rating.py).
const OFFSET_SPAN: u64 = 1 << 48;
const JOINED: u64 = 1 << 50;
const CACHE_LIMIT: usize = 1 << 16;
// Distinct texts (cards, nodes, tenants, instances) before the state is dropped and rebuilt
// from ClickHouse as after a restart: keeps memory bounded if identifiers churn forever.
const INTERNED_LIMIT: usize = 1 << 20;

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

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[derive(Default)]
struct Interner {
    ids: FxMap<Box<str>, u32>,
    texts: Vec<Box<str>>,
}

impl Interner {
    fn id(&mut self, text: &str) -> u32 {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.into());
        self.ids.insert(text.into(), id);
        id
    }

    fn optional(&mut self, text: Option<&str>) -> u32 {
        text.map_or(NONE, |t| self.id(t))
    }

    fn text(&self, id: u32) -> &str {
        if id == NONE {
            ""
        } else {
            &self.texts[id as usize]
        }
    }

    fn nullable(&self, id: u32) -> Option<&str> {
        (id != NONE).then(|| self.text(id))
    }
}

/// A reading of the batch being rated, in its message's place.
struct Pending {
    msg: u32,
    elem: u32,
    kind: Kind,
    event_id: Box<str>,
    ts: Box<str>,
    second: i64,
    site: u32,
    node: u32,
    gpu: u32,
    model: u32,
    tenant: u32,
    instance: u32,
    util_e4: i64,
    mem_mib: u64,
    power_mw: i64,
    partition: u32,
    offset: u64,
}

/// A fetched record set as the core reads it: (position in `sets`, its stream, partition, bytes, first offset).
type RawSet<'a> = (usize, Option<Kind>, u32, &'a [u8], u64);

/// What the core knows of one stream's cards, beside the readings `Held` keeps.
#[derive(Default)]
struct Cards {
    newest: i64,
    first: FxMap<u32, i64>,
    // Per card, once ClickHouse was asked: the second from which it held none of the card's
    // readings then, or None when it held some (see Rater.unchecked_cards).
    clean: FxMap<u32, Option<i64>>,
}

impl Cards {
    fn first_sight(&mut self, gpu: u32, second: i64) {
        self.first.entry(gpu).or_insert(second);
        if second > self.newest {
            self.newest = second;
        }
    }
}

fn key(gpu: u32, second: i64) -> u64 {
    (u64::from(gpu) << 32) | (second as u64 & 0xffff_ffff)
}

fn key_second(key: u64) -> i64 {
    (key & 0xffff_ffff) as i64
}

fn id_hash(event_id: &str) -> EventHash {
    // SipHash with fixed keys (the same in every run), and FxHash from another seed to confirm.
    let mut first = DefaultHasher::new();
    event_id.hash(&mut first);
    let mut second = FxHasher(0x9e37_79b9_7f4a_7c15);
    second.write(event_id.as_bytes());
    second.write_usize(event_id.len());
    (first.finish(), second.finish() | 1) // never (0, 0): see held::EventHash
}

struct RentRate {
    plan: String,
    price_e6: i64,
    per_s: u32,
    discount_e4: i32,
}

struct EnergyRate {
    band: String,
    tariff_e6: i64,
    pue_e4: i32,
}

/// A rated_seconds row; texts as interned ids, prices as indexes into the caches.
struct Rated {
    energy: bool,
    gpu: u32,
    second: i64,
    period: usize,
    tenant: u32,
    instance: u32,
    model: u32,
    site: u32,
    node: u32,
    rate: usize,
    util_e4: i64,
    energy_mj: i64,
    version: u64,
    partition: u32,
    offset: u64,
}

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
    newest_second: i64,
    cutoff: i64,
    pending: Vec<Pending>,
    // Prices and periods, asked of Python once per distinct key (cleared with new rules):
    // Ok(index into the rates) or Err(why the reading cannot be priced).
    rents: FxMap<(u32, u32, i64), Priced>,
    rent_rates: Vec<RentRate>,
    energies: FxMap<(u32, i64), Priced>,
    energy_rates: Vec<EnergyRate>,
    periods: FxMap<i64, usize>,
    period_texts: Vec<String>,
}

/// A stored usage reading: (gpu, second, event_id, tenant, instance, gpu_model, offset).
type StoredUsage = (String, i64, String, Option<String>, Option<String>, String, u64);
/// A stored power reading: (gpu, second, event_id, site, node, power_mw, partition, offset).
type StoredPower = (String, i64, String, String, String, u32, u32, u64);

/// The outcome of pricing: Ok(index into a cache) or Err(the reason it cannot be priced).
type Priced = Result<usize, String>;

impl Core {
    fn reset_caches(&mut self) {
        self.rents.clear();
        self.rent_rates.clear();
        self.energies.clear();
        self.energy_rates.clear();
        self.periods.clear();
        self.period_texts.clear();
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
                self.rent_rates.push(RentRate { plan, price_e6, per_s, discount_e4 });
                Ok(self.rent_rates.len() - 1)
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
                self.energy_rates.push(EnergyRate { band, tariff_e6, pue_e4 });
                Ok(self.energy_rates.len() - 1)
            }
            Err(reason) => Err(reason),
        };
        self.energies.insert((site, second), priced);
        Ok(())
    }

    fn ask_period(&mut self, pricing: &Bound<'_, PyAny>, second: i64) -> PyResult<()> {
        if !self.periods.contains_key(&second) {
            let period: String = pricing.call_method1("period", (second,))?.extract()?;
            self.period_texts.push(period);
            self.periods.insert(second, self.period_texts.len() - 1);
        }
        Ok(())
    }

    /// Every price and period rating the pending batch can ask for, cached: what is missing
    /// is found without the GIL, then asked of the rules (Python) with it.
    fn prepare(&mut self, py: Python<'_>, pricing: &Bound<'_, PyAny>, priced_error: &Bound<'_, PyAny>) -> PyResult<()> {
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

    /// Could another process hold a reading of this stream for (gpu, second) that memory
    /// lacks? (Rater._unsure)
    fn unsure(stream: &Cards, horizon_s: i64, cutoff: i64, gpu: u32, second: i64) -> bool {
        if let Some(Some(clean)) = stream.clean.get(&gpu) {
            if second >= *clean && second >= cutoff {
                return false;
            }
        }
        match stream.first.get(&gpu) {
            None => true,
            Some(first) => second <= first + 2 * horizon_s || second < cutoff,
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

    fn kind_of(&self, topic: &str) -> Option<Kind> {
        if topic == self.usage_topic {
            Some(Kind::Usage)
        } else if topic == self.power_topic {
            Some(Kind::Power)
        } else {
            None
        }
    }

    fn push(&mut self, reading: &reading::Parsed<'_>, msg: u32, elem: u32, partition: u32, offset: u64) {
        let texts = &mut self.texts;
        self.pending.push(Pending {
            msg, elem, kind: reading.kind, event_id: reading.event_id.into(), ts: reading.ts.into(),
            second: reading.second, site: texts.id(reading.site), node: texts.id(reading.node), gpu: texts.id(reading.gpu),
            model: if reading.kind == Kind::Usage { texts.id(reading.model) } else { NONE },
            tenant: texts.optional(reading.tenant), instance: texts.optional(reading.instance),
            util_e4: reading.util_e4, mem_mib: reading.mem_mib, power_mw: reading.power_mw, partition, offset,
        });
    }
}

#[pymethods]
impl Core {
    #[new]
    fn new(usage_topic: String, power_topic: String, horizon_s: i64) -> Self {
        Core {
            usage_topic, power_topic, sites: HashSet::new(), models: HashSet::new(), horizon_s,
            texts: Interner::default(), held: Held::default(), usage: Cards::default(), power: Cards::default(), newest_second: 0, cutoff: 0,
            pending: Vec::new(), rents: FxMap::default(), rent_rates: Vec::new(), energies: FxMap::default(),
            energy_rates: Vec::new(), periods: FxMap::default(), period_texts: Vec::new(),
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
    /// timestamp in ms).
    #[pyo3(signature = (messages, sets, now_s, timestamps = false))]
    fn parse<'py>(&mut self, py: Python<'py>, messages: &Bound<'py, PyList>, sets: Vec<(String, u32, Bound<'py, PyBytes>, u64)>,
                  now_s: i64, timestamps: bool) -> PyResult<Bound<'py, PyTuple>> {
        if self.texts.texts.len() > INTERNED_LIMIT {
            self.forget();
        }
        if self.rents.len() + self.energies.len() + self.periods.len() > CACHE_LIMIT {
            self.reset_caches();
        }
        self.pending.clear();
        let mut others: Vec<usize> = Vec::new();
        let mut values: Vec<(u32, Kind, u32, u64, Bound<'py, PyBytes>)> = Vec::with_capacity(messages.len());
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut positions: HashMap<(String, u32), u64> = HashMap::new();
        let mut last: Option<(String, u32, u64)> = None;
        for (index, message) in messages.iter().enumerate() {
            let topic_obj = message.getattr(pyo3::intern!(py, "topic"))?;
            let topic = topic_obj.cast::<pyo3::types::PyString>()?.to_str()?;
            let partition: u32 = message.getattr(pyo3::intern!(py, "partition"))?.extract()?;
            let offset: u64 = message.getattr(pyo3::intern!(py, "offset"))?.extract()?;
            // Positions per (topic, partition); runs of one partition are the common case.
            match &mut last {
                Some((t, p, o)) if t == topic && *p == partition => *o = (*o).max(offset + 1),
                _ => {
                    if let Some((t, p, o)) = last.take() {
                        let at = positions.entry((t, p)).or_insert(0);
                        *at = (*at).max(o);
                    }
                    last = Some((topic.to_owned(), partition, offset + 1));
                }
            }
            match counts.get_mut(topic) {
                Some(count) => *count += 1,
                None => {
                    counts.insert(topic.to_owned(), 1);
                }
            }
            let Some(expect) = self.kind_of(topic) else {
                others.push(index);
                continue;
            };
            match message.getattr(pyo3::intern!(py, "value"))?.cast_into::<PyBytes>() {
                Ok(bytes) => values.push((index as u32, expect, partition, offset, bytes)),
                Err(_) => others.push(index), // None (or not bytes): the definition says why
            }
        }
        // Parsing needs no Python objects: it runs without the GIL, beside the event loop.
        let slices: Vec<(u32, Kind, u32, u64, &[u8])> =
            values.iter().map(|(index, kind, partition, offset, bytes)| (*index, *kind, *partition, *offset, bytes.as_bytes())).collect();
        let raw: Vec<RawSet<'_>> = sets.iter().enumerate()
            .map(|(n, (topic, partition, bytes, start))| (n, self.kind_of(topic), *partition, bytes.as_bytes(), *start)).collect();
        let first_index = messages.len() as u32;
        let (fast, judge, stamps, set_counts) = py.detach(|| -> PyResult<_> {
            let mut fast = vec![false; slices.len()];
            for (taken, (index, expect, partition, offset, raw)) in fast.iter_mut().zip(&slices) {
                if let Some(parsed) = reading::parse(raw, now_s, *expect, &self.sites, &self.models) {
                    self.push(&parsed, *index, 0, *partition, *offset);
                    *taken = true;
                }
            }
            let (mut judge, mut stamps, mut set_counts) = (Vec::new(), Vec::new(), vec![0usize; raw.len()]);
            let mut index = first_index;
            for (n, expect, partition, data, start) in &raw {
                records::walk(data, *start, |record| {
                    set_counts[*n] += 1;
                    if timestamps {
                        stamps.push(record.timestamp);
                    }
                    let parsed = match (expect, record.value) {
                        (Some(kind), Some(value)) => reading::parse(value, now_s, *kind, &self.sites, &self.models),
                        _ => None,
                    };
                    match parsed {
                        Some(parsed) => self.push(&parsed, index, 0, *partition, record.offset),
                        None => judge.push((index, *n, record)),
                    }
                    index += 1;
                }).map_err(PyValueError::new_err)?;
            }
            Ok((fast, judge, stamps, set_counts))
        })?;
        others.extend(slices.iter().zip(fast).filter(|(_, taken)| !taken).map(|((index, ..), _)| *index as usize));
        others.sort_unstable();
        if let Some((t, p, o)) = last.take() {
            let at = positions.entry((t, p)).or_insert(0);
            *at = (*at).max(o);
        }
        for ((topic, ..), count) in sets.iter().zip(set_counts) {
            if count > 0 {
                *counts.entry(topic.clone()).or_insert(0) += count;
            }
        }
        let mut judged = Vec::with_capacity(judge.len());
        for (index, n, record) in judge {
            let (topic, partition, ..) = &sets[n];
            let headers: Vec<(String, Option<Bound<'py, PyBytes>>)> = records::headers(record.headers).map_err(PyValueError::new_err)?
                .into_iter().map(|(name, value)| (String::from_utf8_lossy(name).into_owned(), value.map(|v| PyBytes::new(py, v))))
                .collect();
            let key = record.key.map(|k| PyBytes::new(py, k));
            let value = record.value.map(|v| PyBytes::new(py, v));
            judged.push((index, topic, partition, record.offset, key, value, PyTuple::new(py, headers)?, record.timestamp).into_pyobject(py)?);
        }
        let others = PyList::new(py, others)?;
        let counts = counts.into_pyobject(py)?;
        let positions = positions.into_pyobject(py)?;
        let judged = PyList::new(py, judged)?;
        let stamps = PyList::new(py, stamps)?;
        PyTuple::new(py, [others.into_any(), counts.into_any(), positions.into_any(), judged.into_any(), stamps.into_any()])
    }

    /// A usage reading Python validated: element `elem` (1-based; 0: the whole message) of message `msg`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (msg, elem, event_id, ts, second, site, node, gpu, model, tenant, instance, util_e4, mem_mib, partition, offset))]
    fn push_usage(&mut self, msg: u32, elem: u32, event_id: &str, ts: &str, second: i64, site: &str, node: &str, gpu: &str,
                  model: &str, tenant: Option<&str>, instance: Option<&str>, util_e4: i64, mem_mib: u64, partition: u32, offset: u64) {
        let parsed = reading::Parsed {
            kind: Kind::Usage, event_id, ts, second, site, node, gpu, model, tenant, instance, util_e4, mem_mib, power_mw: 0,
        };
        self.push(&parsed, msg, elem, partition, offset);
    }

    /// A power reading Python validated (see push_usage).
    #[allow(clippy::too_many_arguments)]
    fn push_power(&mut self, msg: u32, elem: u32, event_id: &str, ts: &str, second: i64, site: &str, node: &str, gpu: &str,
                  power_mw: i64, partition: u32, offset: u64) {
        let parsed = reading::Parsed {
            kind: Kind::Power, event_id, ts, second, site, node, gpu, model: "", tenant: None, instance: None, util_e4: 0,
            mem_mib: 0, power_mw,
        };
        self.push(&parsed, msg, elem, partition, offset);
    }

    /// Keys ClickHouse must be asked about before rating this batch: (usage keys, power
    /// keys) as lists of distinct (gpu, second). Same rule as Rater.lookups.
    fn lookups<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // Without the GIL; `unsure` (per card) first: it spares most look-ups in the big maps.
        let (need_usage, need_power) = py.detach(|| {
            let mut need_usage: HashSet<u64> = HashSet::new();
            let mut need_power: HashSet<u64> = HashSet::new();
            for reading in &self.pending {
                let k = key(reading.gpu, reading.second);
                if Self::unsure(&self.usage, self.horizon_s, self.cutoff, reading.gpu, reading.second) && !self.held.contains::<UsageSeen>(k) {
                    need_usage.insert(k);
                }
                if Self::unsure(&self.power, self.horizon_s, self.cutoff, reading.gpu, reading.second) && !self.held.contains::<PowerSeen>(k) {
                    need_power.insert(k);
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
        for (gpu, second, event_id, tenant, instance, model, _offset) in rows {
            let k = key(self.texts.id(&gpu), second);
            let seen = UsageSeen {
                id: id_hash(&event_id), tenant: self.texts.optional(tenant.as_deref()),
                instance: self.texts.optional(instance.as_deref()), model: self.texts.id(&model),
            };
            self.held.remember(k, seen); // unless a reading of (gpu, second) is held
        }
    }

    /// Stored power readings: (gpu, second, event_id, site, node, power_mw, partition, offset).
    fn preload_power(&mut self, rows: Vec<StoredPower>) {
        for (gpu, second, event_id, site, node, power_mw, partition, offset) in rows {
            let k = key(self.texts.id(&gpu), second);
            let seen = PowerSeen {
                id: id_hash(&event_id), site: self.texts.id(&site), node: self.texts.id(&node), power_mw, partition, offset,
            };
            self.held.remember(k, seen); // unless a reading of (gpu, second) is held
        }
    }

    /// Deduplicate, attribute and price the batch (usage before power, each stream in
    /// message order) and encode its rows. `pricing` answers rent(tenant, model, second) →
    /// (plan, price×10^6, per_s, discount×10^4), energy(site, second) → (band,
    /// tariff×10^6, pue×10^4) and period(second) → str; an exception of class
    /// `priced_error` refuses the reading. Returns (usage block, usage rows, power block,
    /// power rows, rated block, rated rows, unallocated energy rows, conflicts, duplicates,
    /// refused) — conflicts as `Conflict`s, refused as (message index, element, reason).
    /// Prices are asked with the GIL; the rest runs without it, beside the event loop's
    /// Kafka fetches.
    fn rate<'py>(&mut self, py: Python<'py>, pricing: &Bound<'py, PyAny>, priced_error: &Bound<'py, PyAny>, now_ms: i64) -> PyResult<Bound<'py, PyTuple>> {
        self.prepare(py, pricing, priced_error)?;
        let out = py.detach(|| self.rate_pending(now_ms));
        let items: Vec<Bound<'py, PyAny>> = vec![
            PyBytes::new(py, &out.usage_block).into_any(), out.usage_rows.into_pyobject(py)?.into_any(),
            PyBytes::new(py, &out.power_block).into_any(), out.power_rows.into_pyobject(py)?.into_any(),
            PyBytes::new(py, &out.rated_block).into_any(), out.rated_rows.into_pyobject(py)?.into_any(),
            out.unallocated.into_pyobject(py)?.into_any(), out.conflicts.into_pyobject(py)?.into_any(),
            out.duplicates.into_pyobject(py)?.into_any(), out.refused.into_pyobject(py)?.into_any(),
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

/// (stream, gpu, second, kept event id — None when rated before this batch —, conflicting
/// event id, partition, offset)
type Conflict = (&'static str, String, i64, Option<String>, String, u32, u64);

/// What `Core::rate` returns, before it becomes Python objects.
struct RateOutput {
    usage_block: Vec<u8>,
    usage_rows: usize,
    power_block: Vec<u8>,
    power_rows: usize,
    rated_block: Vec<u8>,
    rated_rows: usize,
    unallocated: usize,
    conflicts: Vec<Conflict>,
    duplicates: usize,
    refused: Vec<(u32, u32, String)>,
}

impl Core {
    /// Rate the pending batch with the prices `prepare` cached; no Python involved.
    fn rate_pending(&mut self, now_ms: i64) -> RateOutput {
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
            let usage = UsageSeen { id, tenant: r.tenant, instance: r.instance, model: r.model };
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
                Admitted::Duplicate => {
                    duplicates += 1;
                    continue;
                }
                Admitted::Conflict => {
                    for i in remembered.drain(..) {
                        kept_here.insert((pending[i].kind == Kind::Power, key(pending[i].gpu, pending[i].second)), i);
                    }
                    let kept = kept_here.get(&(r.kind == Kind::Power, k)).map(|i| pending[*i].event_id.to_string());
                    conflicts.push((kind_name, self.texts.text(r.gpu).to_owned(), r.second, kept, r.event_id.to_string(), r.partition, r.offset));
                    continue;
                }
                Admitted::First(slot) => slot,
            };
            remembered.push(index);
            let period = self.periods[&r.second];
            if r.kind == Kind::Usage {
                raw_usage.push(index);
                if let Some(rate) = rate {
                    rated.push(Rated {
                        energy: false, gpu: r.gpu, second: r.second, period, tenant: r.tenant, instance: r.instance, model: r.model,
                        site: r.site, node: r.node, rate, util_e4: r.util_e4, energy_mj: 0, version: OFFSET_SPAN - 1 - r.offset,
                        partition: r.partition, offset: r.offset,
                    });
                }
                if let Some(power) = self.held.get_at::<PowerSeen>(slot) {
                    // The power of this second was rated before its usage: join it now. (If
                    // rules swapped in since then cannot price that second at its site, no
                    // joined row is written and the energy stays unallocated; the Python
                    // rater would refuse the usage reading instead. It takes a rules reload
                    // that withdraws the price of a second already rated.)
                    if let Some(Ok(rate)) = self.energies.get(&(power.site, r.second)) {
                        rated.push(self.energy_row(k, power, Some(&usage), period, *rate));
                    }
                }
            } else {
                let rate = rate.expect("power readings are priced");
                rated.push(self.energy_row(k, &power, self.held.get_at::<UsageSeen>(slot), period, rate));
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
        }
    }

    /// The readings_usage or readings_power block of `rows` (indexes into `pending`).
    fn readings_block(&self, kind: Kind, pending: &[Pending], rows: &[usize], now_ms: i64) -> Vec<u8> {
        if rows.is_empty() {
            return Vec::new();
        }
        let r = || rows.iter().map(|i| &pending[*i]);
        let t = &self.texts;
        let mut b = Block::new(if kind == Kind::Usage { 14 } else { 10 }, rows.len());
        b.strings("event_id", r().map(|p| &*p.event_id));
        b.strings("ts", r().map(|p| &*p.ts));
        b.numbers("second", "DateTime('UTC')", r().map(|p| p.second as u32));
        b.strings("site", r().map(|p| t.text(p.site)));
        b.strings("node", r().map(|p| t.text(p.node)));
        b.strings("gpu_uuid", r().map(|p| t.text(p.gpu)));
        if kind == Kind::Usage {
            b.strings("gpu_model", r().map(|p| t.text(p.model)));
            b.nullable_strings("tenant", r().map(|p| t.nullable(p.tenant)));
            b.nullable_strings("instance", r().map(|p| t.nullable(p.instance)));
            b.numbers("util_pct", "Decimal(9, 4)", r().map(|p| p.util_e4 as i32));
            b.numbers("mem_used_mib", "UInt64", r().map(|p| p.mem_mib));
        } else {
            b.numbers("power_mw", "UInt64", r().map(|p| p.power_mw as u64));
        }
        b.numbers("src_partition", "UInt32", r().map(|p| p.partition));
        b.numbers("src_offset", "UInt64", r().map(|p| p.offset));
        b.numbers("ingested_at", "DateTime64(3, 'UTC')", r().map(|_| now_ms));
        b.into_bytes()
    }

    fn rated_block(&self, rows: &[Rated], now_ms: i64) -> Vec<u8> {
        if rows.is_empty() {
            return Vec::new();
        }
        let r = || rows.iter();
        let t = &self.texts;
        let rent = |row: &Rated| (!row.energy).then(|| &self.rent_rates[row.rate]);
        let energy = |row: &Rated| row.energy.then(|| &self.energy_rates[row.rate]);
        let mut b = Block::new(22, rows.len());
        b.numbers("stream", "Enum8('rent' = 1, 'energy' = 2)", r().map(|row| if row.energy { 2_i8 } else { 1 }));
        b.strings("gpu_uuid", r().map(|row| t.text(row.gpu)));
        b.numbers("second", "DateTime('UTC')", r().map(|row| row.second as u32));
        b.strings("period", r().map(|row| self.period_texts[row.period].as_str()));
        b.strings("tenant", r().map(|row| t.text(row.tenant)));
        b.strings("instance", r().map(|row| t.text(row.instance)));
        b.strings("gpu_model", r().map(|row| t.text(row.model)));
        b.strings("site", r().map(|row| t.text(row.site)));
        b.strings("node", r().map(|row| t.text(row.node)));
        b.strings("plan", r().map(|row| rent(row).map_or("", |rate| rate.plan.as_str())));
        b.numbers("rent_price", "Decimal(18, 6)", r().map(|row| rent(row).map_or(0, |rate| rate.price_e6)));
        b.numbers("rent_per_s", "UInt32", r().map(|row| rent(row).map_or(0, |rate| rate.per_s)));
        b.numbers("discount_pct", "Decimal(9, 4)", r().map(|row| rent(row).map_or(0, |rate| rate.discount_e4)));
        b.numbers("util_pct", "Decimal(9, 4)", r().map(|row| row.util_e4 as i32));
        b.numbers("energy_mj", "UInt64", r().map(|row| row.energy_mj as u64));
        b.strings("band", r().map(|row| energy(row).map_or("", |rate| rate.band.as_str())));
        b.numbers("tariff_per_kwh", "Decimal(18, 6)", r().map(|row| energy(row).map_or(0, |rate| rate.tariff_e6)));
        b.numbers("pue", "Decimal(9, 4)", r().map(|row| energy(row).map_or(0, |rate| rate.pue_e4)));
        b.numbers("version", "UInt64", r().map(|row| row.version));
        b.numbers("src_partition", "UInt32", r().map(|row| row.partition));
        b.numbers("src_offset", "UInt64", r().map(|row| row.offset));
        b.numbers("rated_at", "DateTime64(3, 'UTC')", r().map(|_| now_ms));
        b.into_bytes()
    }
}

#[pymodule]
fn gpubill_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Core>()?;
    module.add("ValueError", module.py().get_type::<PyValueError>())?;
    Ok(())
}
