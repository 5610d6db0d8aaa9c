-- Finance's views name their columns (docs/finance.md documents each one): a view written
-- `SELECT *` is expanded when it is created, so v_invoice_lines of 0003 never showed
-- credit_id (added by 0004). The stored cost-share reports get a view of their own.

DROP VIEW IF EXISTS v_invoice_lines;

CREATE VIEW IF NOT EXISTS v_invoice_lines AS
SELECT number, tenant, period, line_no, kind, gpu_model, plan, site, band, pue, ref_period, credit_id,
       description, quantity, unit, unit_price, amount, exact_amount
FROM invoice_lines FINAL;

CREATE VIEW IF NOT EXISTS v_cost_share AS
SELECT period, site, gpu_model, cards, rented_gpu_hours, rent_revenue, electricity_billed, electricity_unallocated,
       electricity_share, green_kwh, total_kwh, computed_at
FROM cost_share FINAL;

-- v_deadletters of 0003 predates source_index (0005): the element of a batched message.
DROP VIEW IF EXISTS v_deadletters;

CREATE VIEW IF NOT EXISTS v_deadletters AS
SELECT source_topic, source_partition, source_offset, source_line, source_index, reason, original, dead_at
FROM deadletters FINAL;
