-- Claiming: available/scheduled/retryable -> running, the lease +1.
--
-- The claim locks up to %(limit)s runnable jobs (SKIP LOCKED, in priority -> run_at -> id
-- order) and starts their next attempt, in ONE statement. The worker claims by queue; the
-- test harness (awa_cli.testing) by kind, with the very same transition. The RETURNING list
-- is JOB_ROW_FIELDS in order (awa_cli/jobs.py; tests/unit/test_sql_home.py keeps them equal),
-- then the claimed child's parents (claim_returning).
-- Its plan is guarded by tests/integration/worker/test_runtime.py::test_claim_uses_the_claim_index.

-- fragment: job_row_returning
-- JOB_ROW_FIELDS in order (awa_cli/jobs.py): what a statement handing back job rows returns.
RETURNING j.id, j.kind, j.queue, j.args, j.state, j.priority, j.attempt, j.max_attempts,
          j.run_at, j.run_lease, j.heartbeat_at, j.deadline_at, j.deadline_duration,
          j.callback_id, j.callback_timeout_at, j.callback_result, j.errors, j.metadata, j.tags,
          j.unique_key, j.unique_states, j.output, j.ordering_key, j.created_at,
          j.attempted_at, j.finalized_at, j.progress, j.attempted_by

-- fragment: claim_returning
-- What a claim hands back: the job rows, then each one's parents as its handler sees them
-- (job.parents, job.parent_outputs: architecture §16) in the claim's own round trip, NULL
-- for a job that names none. A claimed child's parents are all settled, and the statement's
-- snapshot sees the commit that made it runnable, so they read as the handler would later.
{{job_row_returning}},
          CASE WHEN j.metadata ? 'awa.after' THEN (
              SELECT coalesce(jsonb_agg(jsonb_build_object(
                         'id', d.parent_id, 'state', x.state, 'step', x.step, 'output', x.output)
                         ORDER BY d.parent_id), '[]'::jsonb)
              FROM awa.job_dependencies AS d
{{dep_parent_state}}
              WHERE d.child_id = j.id) END AS parents

-- fragment: attempt_worker_deadline
-- The SET items a starting attempt takes after its start time (both claims): the worker, a
-- fresh heartbeat, the deadline (the job's own, else the queue's %(deadline)s).
    attempted_by = %(worker)s,
    heartbeat_at = now(),
    deadline_at = CASE WHEN coalesce(j.deadline_duration, %(deadline)s) > 0
                       THEN now() + coalesce(j.deadline_duration, %(deadline)s) * interval '1 second' END

-- fragment: start_attempts
-- The claim's transition, shared by both claims: the rows of ``next`` (locked by the caller's
-- CTE) start their next attempt: running, attempt and lease + 1, the attempt's start and
-- worker, a fresh heartbeat, the deadline (the job's own, else the queue's %(deadline)s).
UPDATE awa.jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    limit_slot = '',  -- no limit selects the job: it holds no slot (migration 0016)
{{attempt_worker_deadline}}
FROM next
WHERE j.id = next.id
{{claim_returning}}

-- name: claim_by_queue
-- A worker's claim for one queue. A paused queue (awa.queues.paused) yields nothing: the
-- pause check is an uncorrelated subquery, evaluated once per statement (architecture §10).
WITH next AS (
    SELECT id FROM awa.jobs
    WHERE queue = %(queue)s AND state IN ('available', 'scheduled', 'retryable')
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM awa.queues AS q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
{{start_attempts}};

-- name: claim_by_kind
-- The test harness's claim: one kind in any queue (or the given one), never from a paused queue.
WITH next AS (
    SELECT id FROM awa.jobs
    WHERE kind = %(kind)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text) AND state IN ('available', 'scheduled', 'retryable')
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM awa.queues AS q WHERE q.name = awa.jobs.queue AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
{{start_attempts}};

-- name: next_due
-- Seconds until the queue's next scheduled or retryable job falls due (NULL: none).
SELECT extract(epoch FROM min(run_at) - now()) FROM awa.jobs
WHERE queue = %(queue)s AND state IN ('scheduled', 'retryable');
