-- Invoices, their lines and the monthly cost-share report.
-- An invoice row is written once, when finalized; re-runs read it and never rewrite it.

CREATE TABLE IF NOT EXISTS invoices
(
    number      String,                  -- GB-YYYY-NNNNNN, gap-free per year
    year        UInt16,
    seq         UInt32,
    tenant      String,
    period      String,
    status      LowCardinality(String),  -- finalized
    issued_at   DateTime64(3, 'UTC'),
    currency    LowCardinality(String),
    subtotal    Decimal(18, 2),
    credit_used Decimal(18, 2),
    net         Decimal(18, 2),
    tax         Decimal(18, 2),
    total       Decimal(18, 2),
    vat_rate    Decimal(9, 4)
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant, period);

CREATE TABLE IF NOT EXISTS invoice_lines
(
    number       String,
    tenant       String,
    period       String,
    line_no      UInt16,
    kind         LowCardinality(String),  -- rent | electricity | credit | discount | adjustment
    gpu_model    Nullable(String),
    plan         Nullable(String),
    site         Nullable(String),
    band         Nullable(String),
    pue          Nullable(Decimal(9, 4)),
    ref_period   Nullable(String),        -- adjustment: the period the late data belongs to
    description  String,
    quantity     Decimal(24, 6),
    unit         String,
    unit_price   Decimal(24, 6),
    amount       Decimal(18, 2),
    exact_amount String                   -- the unrounded amount as a fraction, for audit
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant, period, line_no);

CREATE TABLE IF NOT EXISTS cost_share
(
    period                  String,
    site                    LowCardinality(String),
    gpu_model               LowCardinality(String),
    cards                   UInt32,
    rented_gpu_hours        Decimal(24, 6),
    rent_revenue            Decimal(18, 2),
    electricity_billed      Decimal(18, 2),
    electricity_unallocated Decimal(18, 2),
    electricity_share       Decimal(12, 6),
    green_kwh               Decimal(24, 6),
    total_kwh               Decimal(24, 6),
    computed_at             DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(computed_at)
ORDER BY (period, site, gpu_model);

-- One row per completed billing run; the scheduler runs each closed period once.
CREATE TABLE IF NOT EXISTS billing_runs
(
    period       String,
    completed_at DateTime64(3, 'UTC'),
    invoices     UInt32
)
ENGINE = ReplacingMergeTree(completed_at)
ORDER BY period;
