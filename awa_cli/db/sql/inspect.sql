-- name: inspect_job_counts
-- Jobs per (queue, state), with the age of the oldest job that could run now; for the
-- dashboard's overview and /api/stats. One pass over awa.jobs (phase 2 of `awa serve`
-- measures it at a million rows and adds what it needs).
SELECT queue, state::text AS state, count(*) AS count,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available' AND run_at <= now()))
           AS oldest_available_seconds
FROM awa.jobs
GROUP BY queue, state
ORDER BY queue, state

-- name: inspect_jobs_page
-- One page of jobs, newest first, keyset-paginated by id: the next page starts below the
-- last id shown (before_id), so a deep page costs what the first one does.
SELECT * FROM awa.jobs
WHERE (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s
