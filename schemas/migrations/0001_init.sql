-- gpubill schema v1: raw readings, rated seconds, dead letters, data-quality conflicts.
-- Every table is a ReplacingMergeTree keyed so that writing the same input twice
-- (a worker that crashed after its insert but before its offset commit) leaves one row.
-- Read them with FINAL (or through the v_* views of 0002).

CREATE TABLE IF NOT EXISTS readings_usage
(
    event_id      String,
    ts            String,                    -- as sent (RFC 3339)
    second        DateTime('UTC'),           -- floor(ts)
    site          LowCardinality(String),
    node          String,
    gpu_uuid      String,
    gpu_model     LowCardinality(String),
    tenant        Nullable(String),
    instance      Nullable(String),
    util_pct      Decimal(9, 4),
    mem_used_mib  UInt64,
    src_partition UInt32,
    src_offset    UInt64,
    ingested_at   DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(second)
ORDER BY (gpu_uuid, second, src_partition, src_offset);

CREATE TABLE IF NOT EXISTS readings_power
(
    event_id      String,
    ts            String,
    second        DateTime('UTC'),
    site          LowCardinality(String),
    node          String,
    gpu_uuid      String,
    power_mw      UInt64,                    -- power_w quantized to whole mW, half up
    src_partition UInt32,
    src_offset    UInt64,
    ingested_at   DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(second)
ORDER BY (gpu_uuid, second, src_partition, src_offset);

-- One row per (stream, gpu, second): the priced second. `rent` rows come from usage
-- readings with a tenant; `energy` rows from power readings, attributed to the tenant of
-- the same second's usage reading or unallocated (tenant = ''). A late usage reading
-- re-writes the energy row with a higher version, so FINAL converges to the batch join.
-- Money is not stored per second (monthly rent / seconds in a month is not a finite
-- decimal): each row carries the exact price terms; amounts are summed per group and
-- rounded once per invoice line.
CREATE TABLE IF NOT EXISTS rated_seconds
(
    stream         Enum8('rent' = 1, 'energy' = 2),
    gpu_uuid       String,
    second         DateTime('UTC'),
    period         LowCardinality(String),   -- billing period YYYY-MM (billing time zone)
    tenant         String,                   -- '' = unallocated energy
    instance       String,
    gpu_model      LowCardinality(String),
    site           LowCardinality(String),
    node           String,
    plan           LowCardinality(String),   -- rent: monthly | hourly
    rent_price     Decimal(18, 6),           -- rent: monthly rent or hourly rate, CNY
    rent_per_s     UInt32,                   -- rent: one second costs rent_price / rent_per_s
    util_pct       Decimal(9, 4),
    energy_mj      UInt64,                   -- energy: IT energy of the second
    band           LowCardinality(String),   -- energy: tariff band at the site's local time
    tariff_per_kwh Decimal(18, 6),
    pue            Decimal(9, 4),
    version        UInt64,
    src_partition  UInt32,
    src_offset     UInt64,
    rated_at       DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY period
ORDER BY (stream, gpu_uuid, second);

CREATE TABLE IF NOT EXISTS deadletters
(
    source_topic     String,
    source_partition Int32,
    source_offset    Int64,
    source_line      UInt64,                 -- replay: line number in the file, else 0
    reason           String,
    original         String,                 -- the original bytes
    dead_at          DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (source_topic, source_partition, source_offset, source_line);

CREATE TABLE IF NOT EXISTS conflicts
(
    stream              LowCardinality(String),   -- usage | power
    gpu_uuid            String,
    second              DateTime('UTC'),
    kept_event_id       String,
    conflicting_event_id String,
    src_partition       UInt32,
    src_offset          UInt64,
    detected_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (stream, gpu_uuid, second, src_partition, src_offset);
