-- Payments and receivables (issue 38; billing_rules/accounts.py, billing/payments.py, docs/payments.md).
--
-- Every table here is a projection of facts on the books (gpu.books.v1; schemas/books.py):
-- payment_recorded, payment_reversed, credit_applied, invoice_written_off, a credit note's
-- allocations and refund, an issued invoice's terms and the credit applied to it, dunning
-- notices. Like every projected table each replaces rows of one key, so a fact projected twice
-- leaves what projecting it once does. Nothing here is a flag: what an invoice has been paid,
-- what it still asks and whether it is overdue are sums of these rows (docs/payments.md).

-- payments: one row per payment received, named by its ref (a top-up is one too: source top_up).
CREATE TABLE IF NOT EXISTS payments
(
    ref          String,
    tenant       String,
    amount       Decimal(18, 2),          -- CNY, > 0
    method       LowCardinality(String),  -- bank | alipay | wechat | card | other
    received_on  Date,                    -- billing time zone: what "as of" compares
    source       LowCardinality(String),  -- manual | bank_import | top_up
    bank_txn     String DEFAULT '',       -- the bank's transaction id of an imported line
    payer        String DEFAULT '',
    remittance   String DEFAULT '',
    note         String DEFAULT '',
    actor        String DEFAULT '',
    recorded_at  DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY ref;

-- payment_reversals: a payment bounced or recorded by mistake (its allocations are undone by
-- negative allocations of the same fact).
CREATE TABLE IF NOT EXISTS payment_reversals
(
    ref          String,
    tenant       String,
    amount       Decimal(18, 2),
    reason       String,
    reversed_on  Date,
    actor        String DEFAULT '',
    recorded_at  DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY ref;

-- allocations: an amount of a source (a payment or a credit note) on an invoice; negative rows
-- undo a reversed payment's. effective_on: the later of the source's date and the invoice's issue.
CREATE TABLE IF NOT EXISTS allocations
(
    id           String,
    tenant       String,
    invoice      String,
    source_kind  LowCardinality(String),  -- payment | credit_note
    source       String,
    amount       Decimal(18, 2),
    effective_on Date,
    reason       LowCardinality(String),  -- payment | credit | credit_note | reversal | apply
    recorded_at  DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant, id);

-- write_offs: what remained of an invoice marked uncollectible; negative rows are recoveries
-- (a later payment or credit note that reached it: source names it).
CREATE TABLE IF NOT EXISTS write_offs
(
    id           String,
    tenant       String,
    invoice      String,
    amount       Decimal(18, 2),
    reason       String DEFAULT '',
    source       String DEFAULT '',
    written_on   Date,
    actor        String DEFAULT '',
    recorded_at  DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant, id);

-- refunds: credit paid back out of band, from a credit note's part beyond what was outstanding.
CREATE TABLE IF NOT EXISTS refunds
(
    ref          String,
    tenant       String,
    credit_note  String,
    amount       Decimal(18, 2),
    paid_on      Date,
    note         String DEFAULT '',
    actor        String DEFAULT '',
    recorded_at  DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY ref;

-- invoice_terms: an issued invoice's issue and due dates as printed (the payment terms in force
-- at its issue; an invoice issued before this migration has none: its due date is computed from
-- its issue time and today's terms).
CREATE TABLE IF NOT EXISTS invoice_terms
(
    number     String,
    tenant     String,
    issued_on  Date,
    due_on     Date
)
ENGINE = ReplacingMergeTree
ORDER BY number;

-- dunning_notices: each dunning event produced (invoice, kind, days), once.
CREATE TABLE IF NOT EXISTS dunning_notices
(
    invoice   String,
    tenant    String,
    kind      LowCardinality(String),  -- invoice_overdue | suspend_new_rentals
    days      UInt16,
    event_id  String,
    due_on    Date,
    sent_at   DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (invoice, kind, days);

-- Top-ups recorded before payments existed are payments held as credit (received on their UTC
-- date), as a top_up fact of that time is projected (schemas/books.py TopUpRecorded).
INSERT INTO payments (ref, tenant, amount, method, received_on, source, note, recorded_at)
SELECT ref, tenant, amount, 'other', toDate(created_at), 'top_up', note, created_at
FROM balance_ledger FINAL
WHERE ref NOT IN (SELECT ref FROM payments);

-- Finance's views (docs/finance.md documents each column). A row a LEFT JOIN did not match is
-- told by a marker column (`found`), never by join_use_nulls: a SETTINGS clause in a view is not
-- applied for a readonly=1 reader (`finance`), who would read 1970-01-01 where NULL was meant.
CREATE VIEW IF NOT EXISTS v_payments AS
SELECT p.ref AS ref, p.tenant AS tenant, p.amount AS amount, p.method AS method, p.received_on AS received_on,
       p.source AS source, p.bank_txn AS bank_txn, p.payer AS payer, p.remittance AS remittance, p.note AS note,
       p.recorded_at AS recorded_at, if(r.found = 1, r.reversed_on, NULL) AS reversed_on,
       if(r.found = 1, r.reason, NULL) AS reversal_reason
FROM payments AS p FINAL
LEFT JOIN (SELECT ref, reversed_on, reason, toUInt8(1) AS found FROM payment_reversals FINAL) AS r ON r.ref = p.ref;

CREATE VIEW IF NOT EXISTS v_allocations AS
SELECT id, tenant, invoice, source_kind, source, amount, effective_on, reason, recorded_at
FROM allocations FINAL;

CREATE VIEW IF NOT EXISTS v_write_offs AS
SELECT id, tenant, invoice, amount, reason, source, written_on, recorded_at
FROM write_offs FINAL;

CREATE VIEW IF NOT EXISTS v_refunds AS
SELECT ref, tenant, credit_note, amount, paid_on, note, recorded_at
FROM refunds FINAL;

-- Per issued (or voided) invoice, as the books stand now: paid, credited, written off, outstanding.
CREATE VIEW IF NOT EXISTS v_invoice_payments AS
SELECT i.number AS number, i.tenant AS tenant, i.period AS period, i.status AS status,
       if(t.found = 1, t.issued_on, NULL) AS issued_on, if(t.found = 1, t.due_on, NULL) AS due_on, i.total AS total,
       ifNull(a.paid, 0) AS paid, ifNull(a.credited, 0) AS credited, ifNull(w.written_off, 0) AS written_off,
       greatest(i.total - ifNull(a.paid, 0) - ifNull(a.credited, 0) - ifNull(w.written_off, 0), 0) AS outstanding
FROM (SELECT number, tenant, period, status, total FROM invoices FINAL WHERE status IN ('issued', 'voided')) AS i
LEFT JOIN (SELECT number, issued_on, due_on, toUInt8(1) AS found FROM invoice_terms FINAL) AS t ON t.number = i.number
LEFT JOIN (SELECT invoice, sumIf(amount, source_kind = 'payment') AS paid, sumIf(amount, source_kind = 'credit_note') AS credited
           FROM allocations FINAL GROUP BY invoice) AS a ON a.invoice = i.number
LEFT JOIN (SELECT invoice, sum(amount) AS written_off FROM write_offs FINAL GROUP BY invoice) AS w ON w.invoice = i.number;
