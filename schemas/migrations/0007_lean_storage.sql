-- Lean storage for the three tables written for every reading (issue 12, item 3): a codec
-- per column, chosen by measuring each column on data the pipeline wrote (64 cards × 60
-- minutes, merged; docs/performance.md has the figures). Bytes per GPU-second before → after
-- for the largest columns:
--   offsets and versions (monotonic per card)  DoubleDelta, ZSTD   6.7 → 0.03
--   second (consecutive per card)              Delta, ZSTD         1.4 → 0.01
--   energy_mj, power_mw (integers that vary)   T64, ZSTD           3.4 → 2.2
--   util_pct                                   ZSTD                2.0 → 1.1
--   event_id, ts, card and host names (text)   ZSTD(3)             5.2 → 0.9
-- New parts are written with these codecs; existing parts take them when they merge.
-- No type changes: the rows, keys and every query stay as they are.

ALTER TABLE rated_seconds
    MODIFY COLUMN gpu_uuid String CODEC(ZSTD(3)),
    MODIFY COLUMN second DateTime('UTC') CODEC(Delta, ZSTD(1)),
    MODIFY COLUMN tenant String CODEC(ZSTD(3)),
    MODIFY COLUMN instance String CODEC(ZSTD(3)),
    MODIFY COLUMN node String CODEC(ZSTD(3)),
    MODIFY COLUMN util_pct Decimal(9, 4) CODEC(ZSTD(1)),
    MODIFY COLUMN energy_mj UInt64 CODEC(T64, ZSTD(1)),
    MODIFY COLUMN version UInt64 CODEC(DoubleDelta, ZSTD(1)),
    MODIFY COLUMN src_offset UInt64 CODEC(DoubleDelta, ZSTD(1)),
    MODIFY COLUMN rated_at DateTime64(3, 'UTC') CODEC(ZSTD(1));

ALTER TABLE readings_usage
    MODIFY COLUMN event_id String CODEC(ZSTD(3)),
    MODIFY COLUMN ts String CODEC(ZSTD(3)),
    MODIFY COLUMN second DateTime('UTC') CODEC(Delta, ZSTD(1)),
    MODIFY COLUMN node String CODEC(ZSTD(3)),
    MODIFY COLUMN gpu_uuid String CODEC(ZSTD(3)),
    MODIFY COLUMN tenant Nullable(String) CODEC(ZSTD(3)),
    MODIFY COLUMN instance Nullable(String) CODEC(ZSTD(3)),
    MODIFY COLUMN util_pct Decimal(9, 4) CODEC(ZSTD(1)),
    MODIFY COLUMN mem_used_mib UInt64 CODEC(T64, ZSTD(1)),
    MODIFY COLUMN src_offset UInt64 CODEC(DoubleDelta, ZSTD(1)),
    MODIFY COLUMN ingested_at DateTime64(3, 'UTC') CODEC(ZSTD(1));

ALTER TABLE readings_power
    MODIFY COLUMN event_id String CODEC(ZSTD(3)),
    MODIFY COLUMN ts String CODEC(ZSTD(3)),
    MODIFY COLUMN second DateTime('UTC') CODEC(Delta, ZSTD(1)),
    MODIFY COLUMN node String CODEC(ZSTD(3)),
    MODIFY COLUMN gpu_uuid String CODEC(ZSTD(3)),
    MODIFY COLUMN power_mw UInt64 CODEC(T64, ZSTD(1)),
    MODIFY COLUMN src_offset UInt64 CODEC(DoubleDelta, ZSTD(1)),
    MODIFY COLUMN ingested_at DateTime64(3, 'UTC') CODEC(ZSTD(1));
