-- The books on the log (issue 37; schemas/books.py, billing/books_projection.py).
--
-- gpu.books.v1 is the system of record for money; the tables of tenants, top-ups, budgets,
-- invoices, credit notes, the journal, billing runs, re-ratings and API keys are its
-- projection, written idempotently by log position.
--
-- books_positions: how far the projection has taken the topic: per partition, the next
-- offset to project. A fact is projected (all its rows), then its position is stamped, so a
-- projection that stops half-way writes the same rows again (every projected table replaces
-- rows of one key) and stamps once. `halted` is why it stopped at `next_offset` ('' while it
-- runs): a message this gpubill cannot read (a newer schema version); money is never skipped.
CREATE TABLE IF NOT EXISTS books_positions
(
    topic        LowCardinality(String),
    partition    UInt32,
    next_offset  UInt64,
    halted       String DEFAULT '',
    projected_at DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(projected_at)
ORDER BY (topic, partition);

-- rule_sets: every rule set the workers and commands loaded (RuleSet.revision), its files'
-- text as loaded (JSON: file name → text), first seen on the books.
CREATE TABLE IF NOT EXISTS rule_sets
(
    revision        String,
    files           String,
    first_loaded_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY revision;

-- invoice_parties: the seller and buyer an issued invoice printed, as they were at its issue
-- (JSON objects of their fields, from the invoice_issued fact): its documents print them, not the
-- registry or the rules as they are today, so an invoice downloaded again is the one sent.
CREATE TABLE IF NOT EXISTS invoice_parties
(
    id      String,
    number  String,
    seller  String,   -- '' when the rules had no [seller]
    buyer   String
)
ENGINE = ReplacingMergeTree
ORDER BY id;

-- The journal is a projection now: a fact projected twice must leave its entries once, so
-- the table replaces rows of one (invoice, at, action, document) like every projected one.
RENAME TABLE invoice_journal TO invoice_journal_0025;

CREATE TABLE IF NOT EXISTS invoice_journal
(
    at        DateTime64(6, 'UTC'),
    action    LowCardinality(String),
    invoice   String,
    document  String DEFAULT '',
    tenant    String,
    period    String,
    actor     String,
    reason    String DEFAULT '',
    detail    String DEFAULT ''
)
ENGINE = ReplacingMergeTree
ORDER BY (invoice, at, action, document);

INSERT INTO invoice_journal SELECT at, action, invoice, document, tenant, period, actor, reason, detail
FROM invoice_journal_0025;

DROP TABLE invoice_journal_0025;

DROP VIEW IF EXISTS v_invoice_journal;

CREATE VIEW IF NOT EXISTS v_invoice_journal AS
SELECT at, action, invoice, document, tenant, period, actor, reason, detail
FROM invoice_journal FINAL;
