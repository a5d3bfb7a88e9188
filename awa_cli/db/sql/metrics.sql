-- name: queue_depth
-- The backlog of every queue that has one: available jobs, and the age of the one that has
-- been due longest (run_at is when it became claimable). One pass over the claim index's
-- partial range (state available), run once per interval by the maintenance leader, never
-- per scrape.
SELECT queue,
       count(*)::bigint AS available,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_available_age
FROM awa.jobs
WHERE state = 'available'
GROUP BY queue
ORDER BY queue
