-- awa 0009: one set of limits for the fleet (architecture §13).
--
-- Each worker records the digest of the [limits.NAME] tables it enforces in its presence
-- row (NULL: a worker from before this migration). A worker starting with limits that differ
-- from a live worker's refuses to start unless told to replace the fleet's limits
-- (awa worker --accept-limits-change); awa doctor fails while live workers disagree.
ALTER TABLE awa.workers ADD COLUMN IF NOT EXISTS limits_digest text;
