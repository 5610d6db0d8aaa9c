-- The hours a clean audit found clean (issue 26, item 4, reports/audit_hours.py), kept as
-- the rollups are: one row per (period, hour), the latest audit that found it clean wins.
--
-- An hour is clean when its raw readings (corrections applied) give, per tenant and exactly,
-- the seconds, millijoules and unrounded amounts its rated data gives, and its published
-- rollup equals its per-second rows. The row keeps what the hour was then - fingerprints of
-- its raw rows, of its rated rows as reports read them, of the corrections covering it, the
-- rules and the audit's own version - and its per-tenant figures. `gpubill audit` takes an
-- hour from here while all of that is unchanged, and recomputes it otherwise. An hour found
-- to differ is never written, so an old clean row of it stays behind fingerprints that no
-- longer match.
--
-- figures: JSON, per tenant [rent seconds, energy mJ, rent, electricity], the amounts as exact
-- fractions ("n/d") so that stored and recomputed hours are summed and rounded once per tenant.

CREATE TABLE IF NOT EXISTS audit_hours
(
    period            LowCardinality(String),
    hour              DateTime('UTC'),
    generation        UInt64,                  -- the audit's start, the server's clock in ns
    audit_version     UInt32,                  -- reports.audit_hours.AUDIT_VERSION of the audit that wrote it
    rules_revision    String,                  -- RuleSet.digest of the rules it priced the raw side with
    raw_print         String,                  -- readings_usage and readings_power rows of the hour
    rated_print       String,                  -- rated_seconds rows, published rollup rows and how they are read
    corrections_print String,                  -- the stored corrections covering the hour, in log order
    figures           String,
    audited_at        DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(generation)
ORDER BY (period, hour);
