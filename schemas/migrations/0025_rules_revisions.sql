-- The rule set's revision behind every rated generation (issue 25, item 1).
--
-- An invoice records the revision of the rules that priced it (0021); this records the same
-- for the rated data it was built from. RuleSet.revision is the first 12 hex digits of the
-- sha256 of the rule files (`gpubill rules check` prints it).
--
-- rated_revisions: the revisions whose rating wrote per-second rows into an hour. The sink
-- stamps them as it stamps the hour itself (warehouse/writes.py: before the rows, again while
-- the hour keeps being written), so a worker that reloads changed rules mid-hour leaves both.
-- A re-rating, and the live path's rating of a late reading as corrected, stamp theirs too.
--
-- rollup_runs.rules_revisions: what a published generation of an hour was priced under — the
-- hour's rated_revisions when the rollup step made it, the re-rating's revision when a
-- re-rating published it. Empty for generations made before this migration.

CREATE TABLE IF NOT EXISTS rated_revisions
(
    period         LowCardinality(String),
    hour           DateTime('UTC'),
    rules_revision LowCardinality(String),
    stamped_at     DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(stamped_at)
ORDER BY (period, hour, rules_revision);

ALTER TABLE rollup_runs ADD COLUMN IF NOT EXISTS rules_revisions Array(String) DEFAULT [];

-- Finance: each hour's published generation and the rule revisions behind it.
CREATE VIEW IF NOT EXISTS v_rated_generations AS
SELECT period, hour, generation, started_at, rules_revisions
FROM rollup_runs FINAL;
