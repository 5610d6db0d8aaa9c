-- Verified archives of a period's per-second rows (issue 12; docs/guarantees.md, "Retention
-- and archives"). `gpubill archive verify DIR` adds a row when every file of the archive
-- matched its manifest (sha256, rows, content checksum read back by ClickHouse) and, while
-- the period's rows were still in the database, the manifest's totals matched them too
-- (against_db = 1). Retention drops a period only with such a row whose manifest is
-- unchanged (same sha256) and whose totals still equal the database's.

CREATE TABLE IF NOT EXISTS archives
(
    period      String,
    dir         String,                        -- the archive's directory, absolute
    manifest    String,                        -- sha256 of its manifest.json
    files       UInt32,
    rows        UInt64,                        -- rows of all its tables
    against_db  UInt8,                         -- 1: its totals equalled the database's rows
    verified_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(verified_at)
ORDER BY (period, dir, manifest, against_db);
