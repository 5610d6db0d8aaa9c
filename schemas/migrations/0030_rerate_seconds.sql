-- rerate_seconds: the per-second rows of the card-hours a re-rating or a correction rates again
-- from their raw readings (usage/rerating.py: billing_rules' prices and counter energy, the
-- definitions the raters use), in rated_seconds' columns, per run; scratch like rerate_terms
-- (0023): written before the switch reads them, deleted after it (issue 39).
CREATE TABLE IF NOT EXISTS rerate_seconds
(
    run            UInt64,
    stream         Enum8('rent' = 1, 'energy' = 2),
    gpu_uuid       String,
    second         DateTime('UTC'),
    period         LowCardinality(String),
    tenant         String,
    instance       String,
    gpu_model      LowCardinality(String),
    site           LowCardinality(String),
    node           String,
    plan           LowCardinality(String),
    rent_price     Decimal(18, 6),
    rent_per_s     UInt32,
    discount_pct   Decimal(9, 4),
    util_pct       Decimal(9, 4),
    energy_mj      UInt64,
    band           LowCardinality(String),
    tariff_per_kwh Decimal(18, 6),
    pue            Decimal(9, 4),
    version        UInt64,
    src_partition  UInt32,
    src_offset     UInt64,
    measured       UInt8,
    rated_at       DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (run, stream, gpu_uuid, second);
