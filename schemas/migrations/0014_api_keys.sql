-- API keys (issue 14): who may read the tenant API and the web page, and as whom.
--
-- A key is shown once, when it is created (`gpubill key create`): gpb_<id>_<secret>, the
-- secret 256 random bits. Only the SHA-256 of the secret is kept here, so a copy of this
-- table (a backup, finance's read access) cannot be used to sign in. A fast hash is enough
-- for a 256-bit random secret: nobody can search that space, so a slow hash would only cost
-- every request its time. reports/api_keys.py reads and writes it.
--
-- One row per change: create, then revoke, each write the whole row with a later
-- updated_at, and the latest row is the key (FINAL). Nothing is deleted, so "which key was
-- this" stays answerable for every record of api_access_log.

CREATE TABLE IF NOT EXISTS api_keys
(
    id            String,                          -- public: k_ and 16 base32 letters, in logs and lists
    tenant        String,                          -- the tenant it reads, '' for an operator key
    role          LowCardinality(String),          -- tenant | operator
    label         String,                          -- what it is for, free text checked like a tenant note
    secret_sha256 String,                          -- hex SHA-256 of the secret, never the secret
    created_at    DateTime64(3, 'UTC'),
    expires_at    Nullable(DateTime64(3, 'UTC')),  -- refused from this instant on, NULL: never
    revoked_at    Nullable(DateTime64(3, 'UTC')),  -- refused since, NULL: not revoked
    updated_at    DateTime64(3, 'UTC')             -- when this row was written: the latest row wins
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY id;
