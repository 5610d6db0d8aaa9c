-- Why a reading was recorded as a conflict (issue 13; SPEC §4 "Deduplication"):
--   'second taken'    another event_id already holds the reading of this (stream, gpu, second);
--   'event_id reused' its event_id was held with other content (another card, second, or
--                     another tenant, instance or model / site, node or power).
-- Rows written before this column existed were all of the first kind, hence the default.

ALTER TABLE conflicts ADD COLUMN IF NOT EXISTS reason LowCardinality(String) DEFAULT 'second taken';
