-- A message may carry a JSON array of readings (a node agent sending all its cards at
-- once); a bad element is dead-lettered alone, keyed by its index in the message.

ALTER TABLE deadletters ADD COLUMN source_index UInt32 AFTER source_line,
    MODIFY ORDER BY (source_topic, source_partition, source_offset, source_line, source_index);
