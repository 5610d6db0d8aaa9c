//! A batch coming in: the readings pending rating (`Pending`), taken from Kafka messages
//! and record sets as fetched (the plainly valid ones, parsed here without the GIL; see
//! reading.rs and records.rs) and from the readings Python validated (`Core::push_usage`,
//! `Core::push_power`). What the fast path does not take goes back to Python to judge.
//! Memory is bounded here too, as each batch starts (`CACHE_LIMIT`, `INTERNED_LIMIT`).

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::interner::NONE;
use crate::reading::{self, Kind};
use crate::records;
use crate::Core;

// Prices and periods cached before the caches are dropped and asked again.
const CACHE_LIMIT: usize = 1 << 16;
// Distinct texts (cards, nodes, tenants, instances) before the state is dropped and rebuilt
// from ClickHouse as after a restart: keeps memory bounded if identifiers churn forever.
const INTERNED_LIMIT: usize = 1 << 20;

/// A reading of the batch being rated, in its message's place.
pub(crate) struct Pending {
    pub(crate) msg: u32,
    pub(crate) elem: u32,
    pub(crate) kind: Kind,
    pub(crate) event_id: Box<str>,
    pub(crate) ts: Box<str>,
    pub(crate) second: i64,
    pub(crate) site: u32,
    pub(crate) node: u32,
    pub(crate) gpu: u32,
    pub(crate) model: u32,
    pub(crate) tenant: u32,
    pub(crate) instance: u32,
    pub(crate) util_e4: i64,
    pub(crate) mem_mib: u64,
    pub(crate) power_mw: i64,
    /// The card's counter: 0 and `NONE` without one.
    pub(crate) energy_mj: u64,
    pub(crate) epoch: u32,
    pub(crate) partition: u32,
    pub(crate) offset: u64,
}

/// A fetched record set as the core reads it: (position in `sets`, its stream, partition, bytes, first offset).
type RawSet<'a> = (usize, Option<Kind>, u32, &'a [u8], u64);

impl Core {
    /// Start a batch as `Core::parse` describes: bound memory first (the limits above), then
    /// take its readings into `pending`, the plainly valid ones parsed here and the rest
    /// returned for Python to judge.
    pub(crate) fn take_batch<'py>(&mut self, py: Python<'py>, messages: &Bound<'py, PyList>, sets: Vec<(String, u32, Bound<'py, PyBytes>, u64)>,
                                  now_s: i64, timestamps: bool) -> PyResult<Bound<'py, PyTuple>> {
        if self.texts.len() > INTERNED_LIMIT {
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

    fn kind_of(&self, topic: &str) -> Option<Kind> {
        if topic == self.usage_topic {
            Some(Kind::Usage)
        } else if topic == self.power_topic {
            Some(Kind::Power)
        } else {
            None
        }
    }

    pub(crate) fn push(&mut self, reading: &reading::Parsed<'_>, msg: u32, elem: u32, partition: u32, offset: u64) {
        let texts = &mut self.texts;
        self.pending.push(Pending {
            msg, elem, kind: reading.kind, event_id: reading.event_id.into(), ts: reading.ts.into(),
            second: reading.second, site: texts.id(reading.site), node: texts.id(reading.node), gpu: texts.id(reading.gpu),
            model: if reading.kind == Kind::Usage { texts.id(reading.model) } else { NONE },
            tenant: texts.optional(reading.tenant), instance: texts.optional(reading.instance),
            util_e4: reading.util_e4, mem_mib: reading.mem_mib, power_mw: reading.power_mw, energy_mj: reading.energy_mj,
            epoch: texts.optional(reading.epoch), partition, offset,
        });
    }
}
