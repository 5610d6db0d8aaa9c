-- The hot tables take one insert per fetched batch, several a second while a worker
-- drains a backlog. ClickHouse's default merge selector (base 5) merges small parts
-- eagerly: in a ten-minute drain each row was rewritten up to four times, and those
-- merges took a third of an embedded worker's CPU (docs/performance.md). Base 20 merges
-- fewer, larger ranges of parts; a partition keeps tens of parts, far below the counts
-- at which ClickHouse slows inserts. Reads use FINAL, so unmerged versions never count twice.

ALTER TABLE readings_usage MODIFY SETTING merge_selector_base = 20;

ALTER TABLE readings_power MODIFY SETTING merge_selector_base = 20;

ALTER TABLE rated_seconds MODIFY SETTING merge_selector_base = 20;
