-- Rescue: running jobs whose heartbeat is stale or whose deadline passed, and waiting jobs
-- whose callback timed out. Retryable with backoff, or failed on the last attempt; the
-- callback id dies with the rescue; run_lease is kept so the next claim fences the rescued
-- attempt off. Rows of kinds with on_rescued specs are marked rescue_pending; their
-- follow-ups run in a second transaction (rescue_pending_*).
-- Each rescue_<reason> is the one UPDATE around its rescue_candidates_<reason> select (the
-- dry run's statement); what the three rescues set alike is the fragment rescue_ends_attempt.

-- fragment: rescue_ends_attempt
-- The rescued attempt ends: retryable with backoff, or failed on the last attempt. The
-- backoff is the attempt model's (awa_cli/attempts.py: 2**n s plus 0-25 % jitter, capped),
-- its constants passed in. The error entry keeps the rescued attempt's start and worker
-- (attempted_at, attempted_by), as a worker's own failure entry does, so the timeline says
-- which worker died. The callback id dies with the rescue.
    state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
    run_at = CASE WHEN j.attempt >= j.max_attempts THEN j.run_at
                  ELSE now() + least(power(2, least(j.attempt, %(max_exponent)s::int)) * (1 + random() * %(jitter)s::float8),
                                     %(max_backoff)s::float8)
                               * interval '1 second' END,
    errors = j.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'error', %(message)s::text, 'attempt', j.attempt, 'at', now(),
        'started_at', j.attempted_at, 'worker', j.attempted_by,
        'terminal', CASE WHEN j.attempt >= j.max_attempts THEN true END))),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    heartbeat_at = NULL, deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
    callback_in_handler = false,

-- fragment: rescue_marks_pending
-- The last SET item of every rescue and the rest of its UPDATE: a kind with on_rescued specs
-- is marked rescue_pending (its follow-ups run in the second transaction).
    rescue_pending = CASE WHEN j.kind = ANY (%(spec_kinds)s::text[]) THEN %(reason)s END
FROM candidates WHERE j.id = candidates.id
RETURNING j.*

-- fragment: rescue_update
-- The UPDATE of rescue_stale and rescue_deadline around their candidates.
UPDATE awa.jobs AS j SET
{{rescue_ends_attempt}}
{{rescue_marks_pending}}

-- name: rescue_stale
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'running'
      AND heartbeat_at < now() - %(staleness)s * interval '1 second'
    ORDER BY heartbeat_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
{{rescue_update}};

-- name: rescue_deadline
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'running' AND deadline_at < now()
    ORDER BY deadline_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
{{rescue_update}};

-- name: rescue_expired_callback
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'waiting_external' AND callback_timeout_at < now()
    ORDER BY callback_timeout_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE awa.jobs AS j SET
{{rescue_ends_attempt}}
    metadata = jsonb_set(j.metadata, '{awa.waits}', coalesce(j.metadata -> 'awa.waits', '[]'::jsonb)
        || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'callback_id', j.callback_id, 'attempt', j.attempt, 'started_at', j.attempted_at,
            'worker', j.attempted_by, 'resolved', 'timed out', 'at', now())))),
{{rescue_marks_pending}};

-- name: rescue_candidates_stale
-- What a dry run would rescue (rescue_<reason> without the UPDATE).
SELECT * FROM awa.jobs WHERE state = 'running'
  AND heartbeat_at < now() - %(staleness)s * interval '1 second'
ORDER BY heartbeat_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: rescue_candidates_deadline
SELECT * FROM awa.jobs WHERE state = 'running' AND deadline_at < now()
ORDER BY deadline_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: rescue_candidates_expired_callback
SELECT * FROM awa.jobs WHERE state = 'waiting_external' AND callback_timeout_at < now()
ORDER BY callback_timeout_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: rescue_pending_ids
-- Rescued jobs whose follow-ups are still to run.
SELECT id FROM awa.jobs WHERE rescue_pending IS NOT NULL ORDER BY id LIMIT %(limit)s;

-- name: rescue_pending_lock
SELECT * FROM awa.jobs WHERE id = %(id)s AND rescue_pending IS NOT NULL FOR UPDATE SKIP LOCKED;

-- name: rescue_pending_clear
UPDATE awa.jobs SET rescue_pending = NULL WHERE id = %(id)s;
