-- Reading jobs.

-- name: get_job
SELECT * FROM awa.jobs WHERE id = %(id)s;

-- name: list_jobs
SELECT * FROM awa.jobs
WHERE (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_follow_ups
-- The follow-ups a job produced (metadata awa.trigger_id, set by the outcome core), in both
-- tables; served by the partial expression indexes of migration 0004.
SELECT id, kind, state::text AS state FROM awa.jobs
WHERE metadata ? 'awa.trigger_id' AND metadata ->> 'awa.trigger_id' = %(id)s::bigint::text
UNION ALL
SELECT id, kind, 'failed (dead letter)' FROM awa.dead_letters
WHERE metadata ? 'awa.trigger_id' AND metadata ->> 'awa.trigger_id' = %(id)s::bigint::text
ORDER BY id
LIMIT 1000;

-- name: job_summary
-- One job's kind and state, in either table (the job that produced another).
SELECT id, kind, state::text AS state FROM awa.jobs WHERE id = %(id)s
UNION ALL
SELECT id, kind, 'failed (dead letter)' FROM awa.dead_letters WHERE id = %(id)s
LIMIT 1;
