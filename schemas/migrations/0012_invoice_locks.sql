-- The invoicing lease (reports/invoice_lock.py): one invoice run at a time per database.
-- Append-only: a claim, its renewals and its release are rows of the holder, all stamped
-- with the server's clock (INSERT ... SELECT now64()) in claimed_at. A holder's claim time
-- is that of its first row, a renewal made before the expiry extends it, a released row
-- ends it (reports/invoice_lock.py claims_of).
-- Rows go a week after their expiry: the table stays a handful of rows.

CREATE TABLE IF NOT EXISTS invoice_locks
(
    name       LowCardinality(String),  -- the lease: invoicing
    holder     String,                  -- host:pid:token of one claim, unique per claim
    process    String,                  -- linux:boot:pid-namespace:pid:start-tick (liveness), or empty
    command    String,                  -- what holds it, for messages
    claimed_at DateTime64(6, 'UTC'),
    expires_at DateTime64(6, 'UTC'),
    state      LowCardinality(String)   -- claimed | renewed | released
)
ENGINE = MergeTree
ORDER BY (name, holder, claimed_at)
TTL toDateTime(expires_at) + INTERVAL 7 DAY;
