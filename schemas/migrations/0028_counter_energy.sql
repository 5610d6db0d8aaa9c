-- Energy from the cards' counters (issue 39; SPEC §3–4, billing_rules/counters.py).
--
-- A power reading may carry the card's cumulative energy counter and its counting run. The
-- raw table keeps both: energy_epoch '' is a reading without a counter (an epoch is never
-- empty when sent), so a reading with a counter of 0 mJ is told from one without. New
-- columns go before the wall-clock column, which stays the last of each table.
ALTER TABLE readings_power
    ADD COLUMN IF NOT EXISTS energy_mj    UInt64 DEFAULT 0 CODEC(T64, ZSTD(1)) AFTER src_offset,
    ADD COLUMN IF NOT EXISTS energy_epoch String DEFAULT '' AFTER energy_mj;

-- Each rated energy second is graded: measured (its energy is the counter's rise) or
-- estimated (power_w × 1 s). Rent rows and every row rated before counters: 0.
ALTER TABLE rated_seconds
    ADD COLUMN IF NOT EXISTS measured UInt8 DEFAULT 0 AFTER src_offset;

-- An hour's energy graded: measured_mj of energy_mj came from counters, the rest was estimated.
ALTER TABLE rated_hours
    ADD COLUMN IF NOT EXISTS measured_mj UInt64 DEFAULT 0 CODEC(T64, ZSTD(1));
