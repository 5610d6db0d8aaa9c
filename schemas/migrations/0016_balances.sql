-- Prepaid balances and monthly budgets (issue 15, item 2; docs/balances.md).
-- reports/balances.py reads and writes both tables; `gpubill balance` and `gpubill budget`
-- are the commands. Money is Decimal(18, 2) in CNY, like the invoices.
--
-- balance_ledger: one row per top-up, named by its ref (the payment's reference, in the id
-- syntax of schemas/ids.py). A ref is written once: reports/balances.py reads it first, and
-- the same ref with the same tenant and amount changes nothing, while a ref reused with
-- another tenant or amount is refused. ORDER BY ref with ReplacingMergeTree: should two
-- identical top-ups race past that check, FINAL still counts the ref once.
CREATE TABLE IF NOT EXISTS balance_ledger
(
    ref        String,                  -- schemas/ids.py syntax, checked before every write
    tenant     String,                  -- a registered tenant (reports/tenants.py)
    amount     Decimal(18, 2),          -- CNY, > 0, at most 2 decimals and the module's cap
    note       String DEFAULT '',       -- why (a payment id, a ticket), checked like a tenant note
    created_at DateTime64(3, 'UTC')     -- when it was recorded
)
ENGINE = ReplacingMergeTree
ORDER BY ref;

-- budgets: a monthly budget per tenant, compared with the month-to-date estimate. One row
-- per change, the latest wins (FINAL), and amount NULL is "no budget" (`gpubill budget set
-- --none`). Nothing is deleted.
CREATE TABLE IF NOT EXISTS budgets
(
    tenant     String,
    amount     Nullable(Decimal(18, 2)),  -- CNY per billing period, with VAT, NULL: no budget
    note       String DEFAULT '',
    updated_at DateTime64(3, 'UTC')       -- when this row was written: the latest row wins
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY tenant;

-- Finance's view (docs/finance.md, v_balance_ledger): names its columns, like every view.
CREATE VIEW IF NOT EXISTS v_balance_ledger AS
SELECT ref, tenant, amount, note, created_at
FROM balance_ledger FINAL;
