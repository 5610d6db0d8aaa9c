-- The rule set that priced an invoice (issue 25, item 1): RuleSet.revision, the first 12 hex
-- digits of the sha256 of the rule files (`gpubill rules check` shows it). Written with every
-- header (a draft, its issue, a void keeps the invoice's). Invoices written before this
-- column existed read '' (their rule set was not recorded).

ALTER TABLE invoices ADD COLUMN IF NOT EXISTS rules_revision String DEFAULT '' AFTER vat_rate;

DROP VIEW IF EXISTS v_invoices;

CREATE VIEW IF NOT EXISTS v_invoices AS
SELECT id, number, year, seq, tenant, period, status, revision, replaces, issued_at, updated_at, currency, subtotal,
       credit_used, net, tax, total, vat_rate, rules_revision
FROM invoices FINAL;
