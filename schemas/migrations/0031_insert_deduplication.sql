-- The tables the sink writes keep the deduplication tokens of their last 1,000 inserts (issue 40):
-- a batch insert retried after its acknowledgement was lost carries the same token
-- (`<table>:<offsets>:<digest of its bytes>`, streams/sink.py) and is stored once, not as a
-- second part that only merges or FINAL fold away. Only inserts that name a token are
-- deduplicated: every other insert says insert_deduplicate = 0 (warehouse.connection.insert_settings),
-- so rows deleted and inserted again (a correction undone) are never dropped as a repeat.
--
-- Why 1,000: a repeat must still be in the window when it comes. In-process retries come
-- within seconds; after a crash the worker re-reads from its last commit, which is at most
-- 0.5 s (COMMIT_EVERY_S) plus 3 batches in flight (IN_FLIGHT) behind: a few dozen inserts per
-- table at full speed, plus the corrections' and the dead-letter agent's. 1,000 leaves a
-- margin of more than ten times that, and costs what ClickHouse keeps per token: a line of
-- ≈ 60 bytes on disk and in memory per table (≈ 60 kB each), read once when the table loads.
-- ClickHouse's own default for replicated tables is 10,000 (replicated_deduplication_window);
-- non-replicated tables default to 0, no deduplication at all.
ALTER TABLE rated_seconds MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE readings_usage MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE readings_power MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE conflicts MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE deadletters MODIFY SETTING non_replicated_deduplication_window = 1000;
