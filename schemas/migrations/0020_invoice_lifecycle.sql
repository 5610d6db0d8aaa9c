-- The invoice lifecycle (issue 24; docs/guarantees.md, "Corrections"): drafts, issue, void,
-- credit notes and a journal of every change of state.
--
-- invoices: one row per document and state change; FINAL keeps the latest (updated_at) of each
-- id. An invoice is a `draft` (id DRAFT-…, no number), `issued` (number GB-YYYY-NNNNNN,
-- gap-free per year, assigned at issue) or `voided` (fully credited; a later run issues a
-- replacement whose `replaces` names it). A tenant and period may have several: at most one
-- that is not voided. `revision` names the lines the header commits: a draft refreshed by late
-- data writes revision + 1; issuing or voiding writes a header only, so an issued invoice's
-- lines never change. Invoices of 0002 become issued invoices whose id is their number.
--
-- invoice_lines: keyed by the invoice id and revision; lines of a revision no header names are
-- the leftovers of a crash (or of a draft refreshed since) and are deleted under the lease.
--
-- The statements run once, in order (warehouse/migrations.py): the tables of 0002 are renamed,
-- copied into the new shape, and dropped.

RENAME TABLE invoices TO invoices_0002, invoice_lines TO invoice_lines_0002;

CREATE TABLE IF NOT EXISTS invoices
(
    id          String,                  -- DRAFT-<12 hex> for a document made as a draft, else its number
    number      String,                  -- GB-YYYY-NNNNNN once issued, '' for a draft
    year        UInt16,                  -- of the number (the period's year), 0 for a draft
    seq         UInt32,                  -- 0 for a draft
    tenant      String,
    period      String,
    status      LowCardinality(String),  -- draft | issued | voided
    revision    UInt32,                  -- the lines this header commits
    replaces    String DEFAULT '',       -- the voided invoice this one replaces
    issued_at   DateTime64(3, 'UTC'),    -- issue time, a draft: when it was made or last refreshed
    updated_at  DateTime64(6, 'UTC'),    -- this row's time: the latest row of an id wins
    currency    LowCardinality(String),
    subtotal    Decimal(18, 2),
    credit_used Decimal(18, 2),
    net         Decimal(18, 2),
    tax         Decimal(18, 2),
    total       Decimal(18, 2),
    vat_rate    Decimal(9, 4)
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (tenant, period, id);

INSERT INTO invoices (id, number, year, seq, tenant, period, status, revision, replaces, issued_at, updated_at,
                      currency, subtotal, credit_used, net, tax, total, vat_rate)
SELECT number, number, year, seq, tenant, period, 'issued', 1, '', issued_at, issued_at,
       currency, subtotal, credit_used, net, tax, total, vat_rate
FROM invoices_0002 FINAL;

CREATE TABLE IF NOT EXISTS invoice_lines
(
    id           String,                  -- the invoice's id (invoices.id)
    revision     UInt32,
    number       String,                  -- the number when written as issued, '' for a draft's lines (the header's number counts)
    tenant       String,
    period       String,
    line_no      UInt16,
    kind         LowCardinality(String),  -- rent | electricity | credit | discount | adjustment
    gpu_model    Nullable(String),
    plan         Nullable(String),
    site         Nullable(String),
    band         Nullable(String),
    pue          Nullable(Decimal(9, 4)),
    ref_period   Nullable(String),
    credit_id    Nullable(String),
    description  String,
    quantity     Decimal(24, 6),
    unit         String,
    unit_price   Decimal(24, 6),
    amount       Decimal(18, 2),
    exact_amount String
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant, period, id, revision, line_no);

INSERT INTO invoice_lines (id, revision, number, tenant, period, line_no, kind, gpu_model, plan, site, band, pue,
                           ref_period, credit_id, description, quantity, unit, unit_price, amount, exact_amount)
SELECT number, 1, number, tenant, period, line_no, kind, gpu_model, plan, site, band, pue,
       ref_period, credit_id, description, quantity, unit, unit_price, amount, exact_amount
FROM invoice_lines_0002 FINAL
WHERE (number, tenant, period) IN (SELECT number, tenant, period FROM invoices_0002 FINAL);

DROP TABLE invoices_0002;

DROP TABLE invoice_lines_0002;

-- credit_notes: one row per credit note, written once, after its lines (the commit point):
-- CN-YYYY-NNNNNN, gap-free per year of issue (billing time zone). Amounts are positive: what
-- is credited, before tax (subtotal), the VAT reversed at the invoice's rate (tax) and both (total).
CREATE TABLE IF NOT EXISTS credit_notes
(
    number     String,
    year       UInt16,
    seq        UInt32,
    invoice    String,                  -- the issued invoice it credits
    tenant     String,
    period     String,                  -- the invoice's period
    reason     LowCardinality(String),  -- price_error | usage_error | duplicate | goodwill | void | rerate
    note       String DEFAULT '',
    actor      String,                  -- the OS user at the command line, the key id in the API
    issued_at  DateTime64(3, 'UTC'),
    currency   LowCardinality(String),
    subtotal   Decimal(18, 2),
    tax        Decimal(18, 2),
    total      Decimal(18, 2),
    vat_rate   Decimal(9, 4)
)
ENGINE = ReplacingMergeTree
ORDER BY number;

-- credit_note_lines: what each credits of an invoice line (invoice_line_no); positive amounts
-- credit a charge, a negative one gives back a credit or discount the invoice spent (a void).
CREATE TABLE IF NOT EXISTS credit_note_lines
(
    number          String,
    line_no         UInt16,
    invoice         String,
    invoice_line_no UInt16,
    kind            LowCardinality(String),  -- the invoice line's kind
    description     String,
    amount          Decimal(18, 2)
)
ENGINE = ReplacingMergeTree
ORDER BY (number, line_no);

-- invoice_journal: every change of state, appended (never rewritten): draft_made,
-- draft_refreshed, issued, credit_note, voided, replaced.
CREATE TABLE IF NOT EXISTS invoice_journal
(
    at        DateTime64(6, 'UTC'),
    action    LowCardinality(String),
    invoice   String,                   -- the invoice's number, or its draft id
    document  String DEFAULT '',        -- the other document: a credit note, the replacement or the replaced
    tenant    String,
    period    String,
    actor     String,
    reason    String DEFAULT '',
    detail    String DEFAULT ''
)
ENGINE = MergeTree
ORDER BY (invoice, at);

-- Finance's views (docs/finance.md documents each column).
DROP VIEW IF EXISTS v_invoices;

CREATE VIEW IF NOT EXISTS v_invoices AS
SELECT id, number, year, seq, tenant, period, status, revision, replaces, issued_at, updated_at, currency, subtotal,
       credit_used, net, tax, total, vat_rate
FROM invoices FINAL;

DROP VIEW IF EXISTS v_invoice_lines;

CREATE VIEW IF NOT EXISTS v_invoice_lines AS
SELECT h.number AS number, l.id AS id, l.tenant AS tenant, l.period AS period, h.status AS status, l.line_no AS line_no,
       l.kind AS kind, l.gpu_model AS gpu_model, l.plan AS plan, l.site AS site, l.band AS band, l.pue AS pue,
       l.ref_period AS ref_period, l.credit_id AS credit_id, l.description AS description, l.quantity AS quantity,
       l.unit AS unit, l.unit_price AS unit_price, l.amount AS amount, l.exact_amount AS exact_amount
FROM invoice_lines AS l FINAL
INNER JOIN (SELECT id, number, status, revision FROM invoices FINAL) AS h ON l.id = h.id AND l.revision = h.revision;

CREATE VIEW IF NOT EXISTS v_credit_notes AS
SELECT number, year, seq, invoice, tenant, period, reason, note, actor, issued_at, currency, subtotal, tax, total,
       vat_rate
FROM credit_notes FINAL;

CREATE VIEW IF NOT EXISTS v_credit_note_lines AS
SELECT l.number AS number, l.line_no AS line_no, l.invoice AS invoice, l.invoice_line_no AS invoice_line_no,
       l.kind AS kind, l.description AS description, l.amount AS amount
FROM credit_note_lines AS l FINAL
WHERE l.number IN (SELECT number FROM credit_notes);

CREATE VIEW IF NOT EXISTS v_invoice_journal AS
SELECT at, action, invoice, document, tenant, period, actor, reason, detail
FROM invoice_journal;
