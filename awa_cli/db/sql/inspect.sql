-- name: inspect_job_counts
-- Jobs per (queue, state), exact, with the age of the oldest job that could run now. One pass
-- over awa.jobs: what the overview runs while the table is small (see db/dashboard.py; above
-- a size it runs inspect_active_counts and inspect_terminal_sample instead).
SELECT queue, state::text AS state, count(*) AS count,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available' AND run_at <= now()))
           AS oldest_available_seconds
FROM awa.jobs
GROUP BY queue, state
ORDER BY queue, state

-- name: inspect_table_size
-- The planner's row estimate of awa.jobs (pg_class.reltuples: kept by ANALYZE and autovacuum;
-- -1 before the first). Chooses between exact counts and estimates; costs nothing.
SELECT reltuples::float8 AS rows FROM pg_class WHERE oid = 'awa.jobs'::regclass

-- name: inspect_active_counts
-- The unfinished states per (queue, state), exact, from jobs_active_idx (index-only: the cost
-- is the number of unfinished jobs, not the table's size), with the oldest available age.
SELECT queue, state::text AS state, count(*) AS count,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available' AND run_at <= now()))
           AS oldest_available_seconds
FROM awa.jobs
WHERE state NOT IN ('completed', 'failed', 'cancelled')
GROUP BY queue, state
ORDER BY queue, state

-- name: inspect_terminal_sample
-- Completed, failed and cancelled jobs per queue, estimated from a block sample of the table
-- (TABLESAMPLE SYSTEM reads about percent % of its pages) scaled up: bounded work at any size.
-- Flagged as estimates wherever they are shown.
SELECT queue, state::text AS state,
       round(count(*) * 100.0 / %(percent)s::float8)::bigint AS count,
       NULL::float8 AS oldest_available_seconds
FROM awa.jobs TABLESAMPLE SYSTEM (%(percent)s::float8)
WHERE state IN ('completed', 'failed', 'cancelled')
GROUP BY queue, state
ORDER BY queue, state

-- name: inspect_throughput
-- Jobs finished per minute over the last hour, completed and failed (retention index:
-- (state, finalized_at), so a range of it; nothing older is read).
SELECT date_trunc('minute', finalized_at) AS minute, state::text AS state, count(*) AS count
FROM awa.jobs
WHERE state IN ('completed', 'failed') AND finalized_at >= now() - interval '1 hour'
GROUP BY 1, 2
ORDER BY 1, 2

-- name: inspect_queue_throughput
-- One queue's jobs finished per minute over the last hour (the queue page's chart):
-- completed and failed in awa.jobs (retention index, filtered by queue), plus the jobs that
-- died into the dead-letter queue in that hour, counted as failed (dead_letters_queue_idx).
SELECT minute, state, sum(n)::bigint AS count FROM (
    SELECT date_trunc('minute', finalized_at) AS minute, state::text AS state, count(*) AS n
    FROM awa.jobs
    WHERE state IN ('completed', 'failed') AND finalized_at >= now() - interval '1 hour'
      AND queue = %(queue)s::text
    GROUP BY 1, 2
    UNION ALL
    SELECT date_trunc('minute', dead_at), 'failed', count(*)
    FROM awa.dead_letters
    WHERE queue = %(queue)s::text AND dead_at >= now() - interval '1 hour'
    GROUP BY 1
) AS finished
GROUP BY 1, 2
ORDER BY 1, 2

-- name: inspect_queue_running
-- One queue's running jobs per worker process (attempted_by, host:pid), for the queue page
-- (jobs_active_idx finds the queue's running rows; at most its total concurrency).
SELECT coalesce(attempted_by, '') AS worker, count(*) AS running
FROM awa.jobs
WHERE queue = %(queue)s::text AND state = 'running'
GROUP BY 1
ORDER BY 1

-- name: inspect_jobs_page
-- One page of jobs, newest first, keyset-paginated by id: the next page starts below the
-- last id shown (before_id), so a deep page costs what the first one does. A psycopg.sql
-- template: db/dashboard.py joins the inspect_where_* conditions the filters ask for with
-- AND (or TRUE for none), so each combination is its own plan with no `IS NULL OR`: a state
-- filter other than completed walks jobs_state_id_idx backwards from before_id, the others
-- (completed, kind, queue, tag) the primary key.
SELECT * FROM awa.jobs WHERE {conditions} ORDER BY id DESC LIMIT %(limit)s

-- name: inspect_where_state
state = %(state)s::awa.job_state

-- name: inspect_where_kind
kind = %(kind)s::text

-- name: inspect_where_queue
queue = %(queue)s::text

-- name: inspect_where_tag
tags @> ARRAY[%(tag)s::text]

-- name: inspect_where_before_id
id < %(before_id)s::bigint

-- name: inspect_where_none
TRUE
