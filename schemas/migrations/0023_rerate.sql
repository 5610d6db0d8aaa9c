-- Re-rating a period (issue 25, item 3; usage/regenerate.py, billing/rerate.py).
--
-- rerate_terms: the price terms the current rules give, per key of the rated data (stream,
-- tenant and model for rent, site for energy) and UTC hour, one row per piece of constant
-- rate within the hour [lo, hi). Written for one re-rating (`run`), read by its SQL, deleted
-- after it. Rent rows carry the rent terms and zeros for energy, energy rows the reverse,
-- exactly as rated_seconds rows do.
--
-- rerate_runs: one row per re-rating that changed the rated data (its generation, which is
-- the generation its hours were published under in rollup_runs).

CREATE TABLE IF NOT EXISTS rerate_terms
(
    run            UInt64,
    stream         Enum8('rent' = 1, 'energy' = 2),
    tenant         String,
    gpu_model      LowCardinality(String),
    site           LowCardinality(String),
    hour           DateTime('UTC'),
    lo             DateTime('UTC'),
    hi             DateTime('UTC'),
    plan           LowCardinality(String),
    rent_price     Decimal(18, 6),
    rent_per_s     UInt32,
    discount_pct   Decimal(9, 4),
    band           LowCardinality(String),
    tariff_per_kwh Decimal(18, 6),
    pue            Decimal(9, 4)
)
ENGINE = MergeTree
ORDER BY (run, stream, tenant, gpu_model, site, hour);

CREATE TABLE IF NOT EXISTS rerate_runs
(
    period          String,
    generation      UInt64,
    rules_revision  String,
    corrections     UInt32,                    -- stored corrections applied
    hours           UInt32,                    -- hours published anew
    seconds_written UInt64,                    -- per-second rows re-written
    seconds_deleted UInt64,                    -- per-second rows that no longer count (voided, reattributed to nobody)
    started_at      DateTime64(3, 'UTC'),
    finished_at     DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (period, generation);
