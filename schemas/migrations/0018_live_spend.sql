-- Live spend positions (issue 15; docs/balances.md, "Live spend"). Each worker's share of
-- the spend tracker (streams/spend/) stores, every few seconds, where each tenant it holds
-- stands: month to date priced from the stream's exact quantities, the balance and runway.
-- `gpubill spend` and the tenant API read the newest row of a tenant (FINAL) while it is fresh
-- and fall back to computing from the rated rows otherwise. One row per tenant: a newer
-- `as_of` replaces the older (two workers writing the same tenant during a rebalance agree
-- on the figures; the later one wins).
CREATE TABLE IF NOT EXISTS live_spend
(
    tenant         String,
    period         String,                     -- YYYY-MM, the billing period of as_of
    month_to_date  Decimal(18, 2),             -- CNY with VAT, credits and pending adjustments applied
    before_credits Decimal(18, 2),             -- the usage lines (rent, discounts, electricity), before credits and VAT
    budget         Nullable(Decimal(18, 2)),
    balance        Nullable(Decimal(18, 2)),   -- NULL: the tenant is not prepaid
    runway_hours   Nullable(Decimal(18, 2)),
    as_of          DateTime64(3, 'UTC')        -- when the tracker priced it
)
ENGINE = ReplacingMergeTree(as_of)
ORDER BY tenant;
