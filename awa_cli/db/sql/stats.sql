-- name: queue_stats
-- Per queue and state: the job count, the age of the oldest job that could run now, and the
-- completions of the last minute (for completed/s). All queues, or the one given.
SELECT queue, state::text AS state, count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available' AND run_at <= now()))
           AS oldest_available,
       count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '60 seconds')
           AS completed_last_minute
FROM awa.jobs
WHERE %(queue)s::text IS NULL OR queue = %(queue)s
GROUP BY queue, state
