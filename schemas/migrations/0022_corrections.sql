-- Compensating events from gpu.corrections.v1, as the pipeline took them (issue 25, item 2,
-- schemas/corrections.py). The topic is the log and is never changed; this table is its
-- checked copy, one row per message that counts, keyed by its Kafka position (storing the
-- same message twice leaves one row). A correction's event_id seen again with the same content
-- is a duplicate and is not stored again; with other content it is a conflict (the first in
-- the log counts) and goes to correction_conflicts. Malformed ones are dead letters.
--
-- Corrections are applied in log order: they are keyed by gpu_uuid, so all of one card's are
-- on one partition, in offset order.

CREATE TABLE IF NOT EXISTS corrections
(
    event_id      String,
    kind          LowCardinality(String),      -- reattribute | void_readings
    gpu_uuid      String,
    from_s        DateTime('UTC'),             -- [from_s, to_s): the seconds corrected
    to_s          DateTime('UTC'),
    tenant        Nullable(String),            -- reattribute: the tenant (NULL: nobody)
    instance      Nullable(String),            -- reattribute: the instance (NULL: unchanged)
    stream        LowCardinality(String),      -- void_readings: usage, power or both ('' for reattribute)
    reason        String,
    author        String,
    original      String,                      -- the message value as produced
    src_partition UInt32,
    src_offset    UInt64,
    produced_at   DateTime64(3, 'UTC'),        -- the message timestamp
    stored_at     DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (src_partition, src_offset);

CREATE TABLE IF NOT EXISTS correction_conflicts
(
    event_id      String,
    kept_partition UInt32,                     -- the correction that counts
    kept_offset   UInt64,
    src_partition UInt32,                      -- the one refused
    src_offset    UInt64,
    original      String,
    detected_at   DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (src_partition, src_offset);
