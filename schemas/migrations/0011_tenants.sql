-- The tenant registry (issue 13; docs/guarantees.md, "Tenants are registered").
--
-- A tenant id in a reading no longer makes a tenant: only a registered one receives the
-- trial credit (billing.toml new_tenant_credit), and only while it is active. Readings of a
-- well-formed id that is not registered are still rated, kept and invoiced (nothing is
-- lost); `gpubill tenant unknown --period P` lists them and the worker's
-- gpubill_unregistered_tenants gauge counts them. reports/tenants.py reads and writes it.
--
-- One row per change: add, suspend, resume each write the whole row again with a later
-- updated_at; the latest row is the tenant (FINAL, or argMax by updated_at). Nothing is
-- ever deleted, so "was registered" stays answerable.

CREATE TABLE IF NOT EXISTS tenants
(
    tenant       String,                          -- schemas/ids.py syntax, checked before every write
    display_name String,                          -- any script, 1-100 characters, no control characters
    status       LowCardinality(String),          -- active | suspended
    created_at   DateTime64(3, 'UTC'),            -- when it was first registered, kept by every change
    updated_at   DateTime64(3, 'UTC'),            -- when this row was written: the latest row wins
    note         String DEFAULT ''                -- why (who asked, a ticket), free text, bounded like the name
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY tenant;

-- Backfill: every tenant that already has an invoice is a customer the operator has billed,
-- so it is registered as active, keeping its standing (an unspent trial credit stays
-- spendable on its next invoice). Tenants with usage but no invoice yet are not: that is
-- exactly the set an invented id falls in, so the operator registers them by hand after
-- `gpubill tenant unknown`. Only ids in the id syntax (the pattern is schemas/ids.py's
-- ID_PATTERN; a unit test compares the two); a tenant already in the registry is left as
-- it is, so running this statement again changes nothing.
INSERT INTO tenants (tenant, display_name, status, created_at, updated_at, note)
SELECT tenant, tenant, 'active', min(issued_at), now64(3, 'UTC'), 'registered by migration 0011: invoiced before the registry'
FROM invoices
WHERE match(tenant, '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$')
  AND tenant NOT IN (SELECT tenant FROM tenants)
GROUP BY tenant;

-- Rated usage of tenants that are not registered, per period: exact at any moment (it
-- reads v_rated_hours). The worker's gauge counts its rows for the current and the previous
-- period once a minute; `gpubill tenant unknown` reads the same rows through reports/rated.py.
CREATE VIEW IF NOT EXISTS v_unregistered_usage AS
SELECT period, tenant,
       sumIf(seconds, stream = 'rent')     AS rented_seconds,
       sumIf(energy_mj, stream = 'energy') AS energy_mj
FROM v_rated_hours
WHERE tenant != '' AND tenant NOT IN (SELECT tenant FROM tenants)
GROUP BY period, tenant;
