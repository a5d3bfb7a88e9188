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
