-- Rescue: running jobs whose heartbeat is stale or whose deadline passed, and waiting jobs
-- whose callback timed out. Retryable with backoff, or failed on the last attempt; the
-- callback id dies with the rescue; run_lease is kept so the next claim fences the rescued
-- attempt off. Rows of kinds with on_rescued specs are marked rescue_pending; their
-- follow-ups run in a second transaction (rescue_pending_*).
-- Each rescue_<reason> is the one UPDATE around its rescue_candidates_<reason> select (the
-- dry run's statement), written out in full. The backoff is the attempt model's
-- (awa_cli/attempts.py: 2**n s plus 0-25 % jitter, capped), its constants passed in. The
-- error entry keeps the rescued attempt's start and worker (attempted_at, attempted_by), as
-- a worker's own failure entry does, so the timeline says which worker died.

-- name: rescue_stale
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'running'
      AND heartbeat_at < now() - %(staleness)s * interval '1 second'
    ORDER BY heartbeat_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE awa.jobs AS j SET
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
    rescue_pending = CASE WHEN j.kind = ANY (%(spec_kinds)s::text[]) THEN %(reason)s END
FROM candidates WHERE j.id = candidates.id
RETURNING j.*;

-- name: rescue_deadline
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'running' AND deadline_at < now()
    ORDER BY deadline_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE awa.jobs AS j SET
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
    rescue_pending = CASE WHEN j.kind = ANY (%(spec_kinds)s::text[]) THEN %(reason)s END
FROM candidates WHERE j.id = candidates.id
RETURNING j.*;

-- name: rescue_expired_callback
WITH candidates AS (
    SELECT * FROM awa.jobs WHERE state = 'waiting_external' AND callback_timeout_at < now()
    ORDER BY callback_timeout_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE awa.jobs AS j SET
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
    metadata = jsonb_set(j.metadata, '{awa.waits}', coalesce(j.metadata -> 'awa.waits', '[]'::jsonb)
        || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'callback_id', j.callback_id, 'attempt', j.attempt, 'started_at', j.attempted_at,
            'worker', j.attempted_by, 'resolved', 'timed out', 'at', now())))),
    rescue_pending = CASE WHEN j.kind = ANY (%(spec_kinds)s::text[]) THEN %(reason)s END
FROM candidates WHERE j.id = candidates.id
RETURNING j.*;

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
