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
        let mut b = Block::new(if kind == Kind::Usage { 14 } else { 12 }, rows.len());
        b.strings("event_id", r().map(|p| &*p.event_id));
        b.strings("ts", r().map(|p| stored_ts(&p.ts, p.second)));
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
        if kind == Kind::Power {
            b.numbers("energy_mj", "UInt64", r().map(|p| p.energy_mj));
            b.strings("energy_epoch", r().map(|p| t.text(p.epoch)));
        }
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
        let mut b = Block::new(23, rows.len());
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
        b.numbers("measured", "UInt8", r().map(|row| u8::from(row.measured)));
        b.numbers("rated_at", "DateTime64(3, 'UTC')", r().map(|_| now_ms));
        b.into_bytes()
    }
}

/// What the raw tables keep of a reading's ts: "" when it is exactly the second in RFC 3339
/// UTC (YYYY-MM-DDTHH:MM:SSZ; the column `second` holds it), else the text as sent — as
/// schemas.events.stored_ts.
fn stored_ts(ts: &str, second: i64) -> &str {
    if ts.len() == 20 && ts.as_bytes() == plain_utc(second) {
        ""
    } else {
        ts
    }
}

/// `second` as YYYY-MM-DDTHH:MM:SSZ (proleptic Gregorian calendar, days to civil date).
fn plain_utc(second: i64) -> [u8; 20] {
    let (days, secs) = (second.div_euclid(86_400), second.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00Z";
    for (at, width, value) in [(0, 4, year), (5, 2, month), (8, 2, day), (11, 2, secs / 3600), (14, 2, secs / 60 % 60), (17, 2, secs % 60)] {
        let mut v = value;
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{plain_utc, stored_ts};

    #[test]
    fn plain_utc_formats_the_second() {
        assert_eq!(&plain_utc(0), b"1970-01-01T00:00:00Z");
        assert_eq!(&plain_utc(1_772_323_200), b"2026-03-01T00:00:00Z");
        assert_eq!(&plain_utc(951_782_399), b"2000-02-28T23:59:59Z");
        assert_eq!(&plain_utc(951_868_800), b"2000-03-01T00:00:00Z");
        assert_eq!(&plain_utc(4_107_542_399), b"2100-02-28T23:59:59Z");
    }

    #[test]
    fn ts_is_kept_only_when_it_says_more_than_the_second() {
        assert_eq!(stored_ts("2026-03-01T00:00:00Z", 1_772_323_200), "");
        assert_eq!(stored_ts("2026-03-01T08:00:00+08:00", 1_772_323_200), "2026-03-01T08:00:00+08:00");
        assert_eq!(stored_ts("2026-03-01T00:00:00.5Z", 1_772_323_200), "2026-03-01T00:00:00.5Z");
        assert_eq!(stored_ts("2026-03-01t00:00:00z", 1_772_323_200), "2026-03-01t00:00:00z");
    }
}
