-- name: completed_last_minute
-- Completions of the last minute per queue (all queues, or the one given), for completed/s:
-- a range of the retention index (state, finalized_at), so the history is never read. The
-- counts per state come from db/dashboard.py's large-table-safe counts.
SELECT queue, count(*) AS n
FROM awa.jobs
WHERE state = 'completed' AND finalized_at > now() - interval '60 seconds'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
GROUP BY queue
