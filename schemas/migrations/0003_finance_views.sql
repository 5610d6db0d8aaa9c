-- Views for finance (SQL clients, BI tools): the latest version of every row, and
-- revenue per period, tenant, model and site. The *_unrounded columns are exact to 30
-- decimal places (Decimal256); invoices round once per line, so compare to the fen.

CREATE VIEW IF NOT EXISTS v_rated_seconds AS
SELECT * FROM rated_seconds FINAL;

CREATE VIEW IF NOT EXISTS v_usage_by_tenant AS
SELECT
    period,
    tenant,
    site,
    gpu_model,
    countIf(stream = 'rent')                                                   AS rented_seconds,
    sumIf(energy_mj, stream = 'energy')                                        AS energy_mj_total,
    sumIf(toDecimal256(rent_price, 30) / greatest(rent_per_s, 1), stream = 'rent') AS rent_cny_unrounded,
    sumIf(toDecimal256(energy_mj, 30) * pue * tariff_per_kwh / 3600000000, stream = 'energy')
                                                                               AS electricity_cny_unrounded
FROM rated_seconds FINAL
GROUP BY period, tenant, site, gpu_model;

CREATE VIEW IF NOT EXISTS v_invoices AS
SELECT * FROM invoices FINAL;

CREATE VIEW IF NOT EXISTS v_invoice_lines AS
SELECT * FROM invoice_lines FINAL;

CREATE VIEW IF NOT EXISTS v_deadletters AS
SELECT * FROM deadletters FINAL;
