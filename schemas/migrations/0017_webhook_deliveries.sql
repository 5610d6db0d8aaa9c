-- Webhook deliveries of billing events (issue 15; docs/balances.md, "Webhooks").
-- `gpubill events deliver` (streams/webhooks.py) writes one row per attempt through
-- reports/webhook_deliveries.py, before it commits the event's offset. `gpubill events
-- deliveries` reads them back, newest first.
--
-- Append-only: a retry is a new row with the next attempt number, and an event delivered
-- again after a crash (at-least-once) gets new rows starting from attempt 1 again.
-- Partitioned by month of the attempt, so old months can be dropped whole. The receiver's
-- answer is kept to 200 characters at most, the URL without its password or query.
CREATE TABLE IF NOT EXISTS webhook_deliveries
(
    event_id     String,                     -- be_… (schemas/billing_events.py), '' for a message that was not an event
    tenant       String,                     -- the event's tenant, '' likewise
    kind         LowCardinality(String),     -- budget_threshold, balance_low, balance_exhausted, '' likewise
    url          String,                     -- the target, password and query shown as ***
    attempt      UInt16,                     -- 1, 2 ... and 0 for a message that was never sent
    status       LowCardinality(String),     -- delivered, failed (another attempt follows) or gave_up
    http_status  Nullable(UInt16),           -- the receiver's answer, NULL when none came
    error        String,                     -- '' when delivered, else why (at most 200 characters)
    duration_ms  UInt32,                     -- from sending to the answer or the error
    attempted_at DateTime64(3, 'UTC')        -- when the attempt started
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(attempted_at)
ORDER BY (tenant, event_id, attempted_at, attempt);
