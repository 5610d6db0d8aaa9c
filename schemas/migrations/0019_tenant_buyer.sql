-- The buyer on an invoice (issue 23, item 2): a tenant's legal name, tax id, address and
-- e-mail, from the registry. billing/tenants.py checks each before every write
-- (`gpubill tenant add ID --name NAME --legal-name --tax-id --address --email`, and
-- `gpubill tenant update ID` to fill them in or change them):
--
--   legal_name  any script, at most 200 characters, no control or bidi characters (as a name)
--   tax_id      A-Z, 0-9 and '-', 4 to 40 characters; an 18-character 统一社会信用代码 passes
--               its check character (billing_rules/parties.py)
--   address     any script, at most 300 characters, no control or bidi characters
--   email       one address, local@domain.tld, ASCII, at most 254 characters
--
-- Rows written before these columns existed read '' in each: a tenant registered by name
-- only. Like every change to the registry, an update writes the whole row again with a
-- later updated_at, so nothing is deleted.

ALTER TABLE tenants
    ADD COLUMN IF NOT EXISTS legal_name String DEFAULT '' AFTER note,
    ADD COLUMN IF NOT EXISTS tax_id String DEFAULT '' AFTER legal_name,
    ADD COLUMN IF NOT EXISTS address String DEFAULT '' AFTER tax_id,
    ADD COLUMN IF NOT EXISTS email String DEFAULT '' AFTER address;
