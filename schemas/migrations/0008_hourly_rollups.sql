-- Exact hourly rollups of rated_seconds (issue 12; docs/guarantees.md, "Rollups").
--
-- rated_hours holds, per billing period, UTC hour and every price term an invoice line,
-- a cost-share row or a usage-report row depends on, the rated seconds' quantities. It is
-- never summed into by a materialized view (a re-inserted per-second row would count
-- twice): the rollup step (reports/rollup.py) computes an hour from rated_seconds FINAL
-- and writes it whole under a new generation; the hour's generation is published in
-- rollup_runs only after the rows are in, and readers take an hour's rows only at its
-- published generation. A rollup killed half-way leaves rows nobody reads.
--
-- rated_writes says which hours changed: the sink stamps the (period, hour)s a batch
-- writes, before writing them, with the database's clock plus a margin ("written until";
-- warehouse/writes.py). An hour whose latest stamp is not older than its published rollup's
-- start less the margin is read from rated_seconds until it is rolled up again, so a read
-- is exact at any moment, whatever the rollup's lag. (A materialized view stamping every
-- insert did the same but cost the pipeline about a fifth of its speed: docs/performance.md.)

-- From now on the raw tables' `ts` holds the text as sent only when it says more than
-- `second` (a fraction, an offset); '' when it was exactly YYYY-MM-DDTHH:MM:SSZ of `second`
-- (schemas.events.stored_ts; the Rust core the same). No DDL: the column stays a String.

CREATE TABLE IF NOT EXISTS rated_hours
(
    period         LowCardinality(String),
    tenant         String,                                   -- '' = unallocated energy
    hour           DateTime('UTC') CODEC(Delta, ZSTD(1)),    -- start of the UTC hour
    day            Date,                                     -- the second's date in the billing time zone
    stream         Enum8('rent' = 1, 'energy' = 2),
    gpu_uuid       String CODEC(ZSTD(3)),
    instance       String CODEC(ZSTD(3)),
    gpu_model      LowCardinality(String),
    site           LowCardinality(String),
    plan           LowCardinality(String),
    rent_price     Decimal(18, 6),
    rent_per_s     UInt32,
    discount_pct   Decimal(9, 4),
    band           LowCardinality(String),
    tariff_per_kwh Decimal(18, 6),
    pue            Decimal(9, 4),
    seconds        UInt32,                                   -- rated seconds (rent: rented, energy: metered)
    util_sum       Decimal(18, 4),                           -- sum of util_pct over the seconds
    energy_mj      UInt64 CODEC(T64, ZSTD(1)),
    minutes        Array(UInt8) CODEC(ZSTD(1)),              -- minute of the hour (0-59) ...
    minute_qty     Array(UInt64) CODEC(ZSTD(1)),             -- ... and its seconds (rent) or mJ (energy)
    generation     UInt64 CODEC(DoubleDelta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY period
ORDER BY (period, tenant, hour, stream, gpu_uuid);

-- One row per rollup of an hour; the hour's published generation is the largest.
CREATE TABLE IF NOT EXISTS rollup_runs
(
    period       LowCardinality(String),
    hour         DateTime('UTC'),
    generation   UInt64,                       -- the server's clock in ns when the rollup began
    started_at   DateTime64(3, 'UTC'),         -- the same instant: writes stamped before it (less a margin) are in
    billing_tz   LowCardinality(String),       -- the time zone `day` was computed in
    rows         UInt64,
    seconds      UInt64,
    energy_mj    UInt64
)
ENGINE = ReplacingMergeTree(generation)
ORDER BY (period, hour);

CREATE TABLE IF NOT EXISTS rated_writes
(
    period     LowCardinality(String),
    hour       DateTime('UTC'),
    written_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(written_at)
ORDER BY (period, hour);

-- Data written before this migration: every hour counts as written now.
INSERT INTO rated_writes
SELECT period, toStartOfHour(second) AS hour, now64(3, 'UTC') FROM rated_seconds GROUP BY period, hour;

-- Periods whose per-second rows (rated and raw) retention dropped, after archiving and
-- verifying them (gpubill archive; docs/guarantees.md): their reports read rollups only.
CREATE TABLE IF NOT EXISTS retention_runs
(
    period     String,
    archive    String,                        -- the verified archive's directory
    manifest   String,                        -- sha256 of its manifest
    dropped_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY period;

-- The model of a card, from its usage readings, for power seconds that had none (cost share).
CREATE TABLE IF NOT EXISTS card_models
(
    gpu_uuid  String,
    gpu_model SimpleAggregateFunction(min, LowCardinality(String))
)
ENGINE = AggregatingMergeTree
ORDER BY gpu_uuid;

INSERT INTO card_models SELECT gpu_uuid, min(gpu_model) FROM readings_usage GROUP BY gpu_uuid;

-- Hours read from the per-second rows: written since their published rollup (less the
-- margin reports/rated.py explains), or never rolled up; not those of a period whose
-- per-second rows retention dropped. A missing rollup reads as started_at 1970: live.
CREATE VIEW IF NOT EXISTS v_live_hours AS
SELECT w.period AS period, w.hour AS hour, w.written_at AS last_write
FROM (SELECT period, hour, max(written_at) AS written_at FROM rated_writes GROUP BY period, hour) AS w
LEFT JOIN (SELECT period, hour, argMax(started_at, generation) AS started_at FROM rollup_runs GROUP BY period, hour) AS r
    ON w.period = r.period AND w.hour = r.hour
WHERE w.written_at >= r.started_at - INTERVAL 60 SECOND
  AND w.period NOT IN (SELECT period FROM retention_runs);

-- For finance and BI: the rated data per hour and price terms, exact at any moment — the
-- published rollups, and the per-second rows grouped the same way for the live hours.
CREATE VIEW IF NOT EXISTS v_rated_hours AS
SELECT period, tenant, hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct,
       band, tariff_per_kwh, pue, seconds, util_sum, energy_mj
FROM rated_hours
WHERE (period, hour, generation) IN (SELECT period, hour, max(generation) FROM rollup_runs GROUP BY period, hour)
  AND (period, hour) NOT IN (SELECT period, hour FROM v_live_hours)
UNION ALL
SELECT period, tenant, toStartOfHour(second) AS hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price,
       rent_per_s, discount_pct, band, tariff_per_kwh, pue, toUInt32(count()) AS seconds, sum(util_pct) AS util_sum,
       sum(rated_seconds.energy_mj) AS energy_mj
FROM rated_seconds FINAL
WHERE (period, toStartOfHour(second)) IN (SELECT period, hour FROM v_live_hours)
GROUP BY period, tenant, hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct,
         band, tariff_per_kwh, pue;

-- Finance's revenue per period, tenant, site and model (exact to 30 decimal places; invoices
-- round once per line, so compare to the fen).
DROP VIEW IF EXISTS v_usage_by_tenant;

CREATE VIEW IF NOT EXISTS v_usage_by_tenant AS
SELECT
    period,
    tenant,
    site,
    gpu_model,
    sumIf(seconds, stream = 'rent')                                                    AS rented_seconds,
    sumIf(energy_mj, stream = 'energy')                                                AS energy_mj_total,
    sumIf(toDecimal256(rent_price, 30) * seconds / greatest(rent_per_s, 1), stream = 'rent') AS rent_cny_unrounded,
    sumIf(toDecimal256(rent_price, 30) * seconds * discount_pct / 100 / greatest(rent_per_s, 1), stream = 'rent')
                                                                                       AS discount_cny_unrounded,
    sumIf(toDecimal256(energy_mj, 30) * pue * tariff_per_kwh / 3600000000, stream = 'energy')
                                                                                       AS electricity_cny_unrounded
FROM v_rated_hours
GROUP BY period, tenant, site, gpu_model;

-- Every rolled-up hour at its published generation; stale = written since (read live until re-rolled).
CREATE VIEW IF NOT EXISTS v_rollup_hours AS
SELECT l.period AS period, l.hour AS hour, l.latest.1 AS generation, l.latest.2 AS started_at,
       l.latest.3 AS billing_tz, l.latest.4 AS rows, l.latest.5 AS seconds, l.latest.6 AS energy_mj,
       w.written_at AS last_write, w.written_at >= l.latest.2 - INTERVAL 60 SECOND AS stale
FROM (SELECT period, hour, argMax(tuple(generation, started_at, billing_tz, rows, seconds, energy_mj), generation) AS latest
      FROM rollup_runs GROUP BY period, hour) AS l
LEFT JOIN (SELECT period, hour, max(written_at) AS written_at FROM rated_writes GROUP BY period, hour) AS w
    ON l.period = w.period AND l.hour = w.hour;
