-- Contract discounts become their own invoice lines (SPEC §5): rated rent keeps the list
-- price and the discount percentage; credit lines name the grant they spend.

ALTER TABLE rated_seconds ADD COLUMN IF NOT EXISTS discount_pct Decimal(9, 4) DEFAULT 0 AFTER rent_per_s;

ALTER TABLE invoice_lines ADD COLUMN IF NOT EXISTS credit_id Nullable(String) AFTER ref_period;

DROP VIEW IF EXISTS v_usage_by_tenant;

CREATE VIEW IF NOT EXISTS v_usage_by_tenant AS
SELECT
    period,
    tenant,
    site,
    gpu_model,
    countIf(stream = 'rent')                                                   AS rented_seconds,
    sumIf(energy_mj, stream = 'energy')                                        AS energy_mj_total,
    sumIf(toDecimal256(rent_price, 30) / greatest(rent_per_s, 1), stream = 'rent') AS rent_cny_unrounded,
    sumIf(toDecimal256(rent_price, 30) * discount_pct / 100 / greatest(rent_per_s, 1), stream = 'rent')
                                                                               AS discount_cny_unrounded,
    sumIf(toDecimal256(energy_mj, 30) * pue * tariff_per_kwh / 3600000000, stream = 'energy')
                                                                               AS electricity_cny_unrounded
FROM rated_seconds FINAL
GROUP BY period, tenant, site, gpu_model;
