-- The API's access records (issue 14): every download and every refused request of the
-- tenant API and the web page, written in batches by the server (reports/access_log.py),
-- shown by `gpubill key audit`, read by finance through v_api_access (docs/finance.md).
--
-- Append-only, one row per request, kept until the operator drops old partitions (monthly,
-- by the request's UTC time). Text from outside (the path asked for, the client address)
-- is bounded in length before it is written and shown through terminal_text when printed.

CREATE TABLE IF NOT EXISTS api_access_log
(
    time    DateTime64(3, 'UTC'),       -- when the request was answered
    key_id  String,                     -- the key's public id, '' when none could be read from the request
    tenant  String,                     -- whose data was asked for, '' when refused before that was known
    method  LowCardinality(String),     -- GET, POST ...
    what    String,                     -- the route: /v1/usage, /v1/invoices/{number} ...
    period  String,                     -- YYYY-MM when the request named one, else ''
    format  LowCardinality(String),     -- csv | json | parquet | pdf, or ''
    bytes   UInt64,                     -- body bytes sent
    status  UInt16,                     -- HTTP status answered
    client  String,                     -- the client's address
    reason  String                      -- '' when served, else why it was refused (one line)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (time, key_id);

-- Finance's view (docs/finance.md, v_api_access): names its columns, like every view.
CREATE VIEW IF NOT EXISTS v_api_access AS
SELECT time, key_id, tenant, method, what, period, format, bytes, status, client, reason
FROM api_access_log;
