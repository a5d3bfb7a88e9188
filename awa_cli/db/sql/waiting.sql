-- Waiting for a job's result (Client.wait_for_job, architecture §11). A waiter marks the job
-- awaited, so the trigger of sql/0004_progress_history.sql announces its end on the channel
-- awa_job_done (payload: the job id) from the finishing transaction; jobs nobody waits for
-- send nothing. All waiters of one client share one LISTEN connection and these batched
-- statements.

-- name: wait_mark
-- Mark the jobs awaited (their end will be notified). Only unmarked, unfinished rows are
-- written: a second waiter, or a finished job, costs no write.
UPDATE awa.jobs SET awaited = true
WHERE id = ANY (%(ids)s::bigint[]) AND NOT awaited
  AND state NOT IN ('completed', 'failed', 'cancelled');

-- name: wait_check
-- The waited jobs as they are now (the caller keeps the finished ones).
SELECT * FROM awa.jobs WHERE id = ANY (%(ids)s::bigint[]);

-- name: wait_check_dead
-- Waited jobs gone from awa.jobs: a dead letter counts as failed (architecture §15.2).
SELECT * FROM awa.dead_letters WHERE id = ANY (%(ids)s::bigint[]);
