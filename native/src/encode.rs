//! The Native-format blocks the core writes — readings_usage, readings_power and
//! rated_seconds — column by column with `Block` (block.rs). Columns, their order and their
//! types are the tables' specs (schemas/tables.py) as the Python encoder writes them
//! (warehouse/blocks.py over warehouse/native_format.py; LowCardinality(String) goes as
//! String): tests/unit/test_native_core.py requires the same bytes from both.

use crate::block::Block;
use crate::rate::Rated;
use crate::reading::Kind;
use crate::Core;
use crate::intake::Pending;

impl Core {
    /// The readings_usage or readings_power block of `rows` (indexes into `pending`).
    pub(crate) fn readings_block(&self, kind: Kind, pending: &[Pending], rows: &[usize], now_ms: i64) -> Vec<u8> {
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

    pub(crate) fn rated_block(&self, rows: &[Rated], now_ms: i64) -> Vec<u8> {
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
