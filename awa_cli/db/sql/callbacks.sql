-- External callbacks: registration and the in-handler wait (worker side), and resolution
-- (complete / fail / retry / resume / heartbeat, from a client or the CLI).
--
-- Resolutions match a job waiting on the callback, or one whose handler registered it and
-- has not parked yet (its later park is then a harmless stale no-op): the "callback guard"
--   callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
--   AND (%(lease)s::bigint IS NULL OR run_lease = %(lease)s::bigint)
-- written out in full in each statement that uses it.
--
-- Each resolution (and a timeout's rescue) appends the wait it ends to the job's metadata
-- `awa.waits`: the callback id, the attempt and the run that waited (its start and worker),
-- how it was resolved and when, so the timeline keeps every wait, and the run before a
-- resume, after the row moved on (architecture §11).

-- name: register_callback
-- A fresh callback id for the running attempt (guarded by its lease).
UPDATE awa.jobs SET callback_id = %(callback_id)s, callback_result = NULL,
    callback_timeout_at = now() + %(timeout)s * interval '1 second'
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id;

-- name: begin_wait
-- running -> waiting_external while the handler waits inside wait_for_callback. The handler
-- keeps its slot; no heartbeat or deadline applies while it waits. A callback resumed
-- before the wait began (callback_result set) is returned at once instead.
UPDATE awa.jobs SET
    state = CASE WHEN callback_result IS NULL THEN 'waiting_external'::awa.job_state
                 ELSE 'running'::awa.job_state END,
    callback_in_handler = callback_result IS NULL,
    callback_id = CASE WHEN callback_result IS NULL THEN callback_id END,
    callback_timeout_at = CASE WHEN callback_result IS NULL THEN callback_timeout_at END,
    heartbeat_at = CASE WHEN callback_result IS NULL THEN NULL ELSE now() END,
    deadline_at = CASE WHEN callback_result IS NULL THEN NULL ELSE deadline_at END
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running' AND callback_id = %(callback_id)s
RETURNING callback_result IS NOT NULL AS resumed, callback_result;

-- name: poll_wait
-- What a waiting handler checks on each wake-up.
SELECT state, callback_id, callback_result, run_lease FROM awa.jobs WHERE id = %(id)s;

-- fragment: callback_waiter
-- The job waiting on %(callback_id)s: parked (waiting_external) or waiting inside its handler
-- (running), of the attempt %(lease)s when it is given (NULL: whichever attempt waits).
    callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
    AND (%(lease)s::bigint IS NULL OR run_lease = %(lease)s::bigint)

-- fragment: callback_wait_entry
-- The start of the SET item appending the wait's entry to metadata's awa.waits (the callback,
-- the attempt, its start and worker, when it was resolved); the statement adds 'resolved'
-- and closes it (jsonb keeps the keys in its own order, whatever the order written).
    metadata = jsonb_set(metadata, '{awa.waits}', coalesce(metadata -> 'awa.waits', '[]'::jsonb)
        || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'callback_id', callback_id, 'attempt', attempt, 'started_at', attempted_at,
            'worker', attempted_by, 'at', now(),

-- name: waiting_job
-- The job waiting on a callback, unchanged.
SELECT * FROM awa.jobs WHERE
    callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
    AND (%(lease)s::bigint IS NULL OR run_lease = %(lease)s::bigint);

-- name: resolve_complete
UPDATE awa.jobs SET
{{callback_wait_entry}}
            'resolved', 'completed')))),
    state = 'completed', finalized_at = now(), callback_timeout_at = NULL,
    callback_in_handler = false, callback_result = %(payload)s::jsonb,
    heartbeat_at = NULL, deadline_at = NULL
WHERE
{{callback_waiter}}
RETURNING *, attempt AS parked_attempt;

-- name: resolve_fail
UPDATE awa.jobs SET
{{callback_wait_entry}}
            'resolved', 'failed')))),
    state = 'failed', finalized_at = now(), callback_timeout_at = NULL,
    callback_in_handler = false, heartbeat_at = NULL, deadline_at = NULL,
    errors = errors || jsonb_build_array(
        jsonb_set(jsonb_set(%(entry)s::jsonb, '{attempt}', to_jsonb(attempt)),
                  '{error}', to_jsonb(%(error)s::text)))
WHERE
{{callback_waiter}}
RETURNING *, attempt AS parked_attempt;

-- name: resolve_retry
UPDATE awa.jobs AS j SET
    metadata = jsonb_set(j.metadata, '{awa.waits}', coalesce(j.metadata -> 'awa.waits', '[]'::jsonb)
        || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'callback_id', j.callback_id, 'attempt', j.attempt, 'started_at', j.attempted_at,
            'worker', j.attempted_by, 'resolved', 'retried', 'at', now())))),
    state = 'available', attempt = 0, run_at = now(),
    callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false,
    heartbeat_at = NULL, deadline_at = NULL
FROM (SELECT id, attempt FROM awa.jobs WHERE
    {{callback_waiter}}
      FOR UPDATE) AS before
WHERE j.id = before.id
RETURNING j.*, before.attempt AS parked_attempt;

-- name: resume
-- A handler waiting inside wait_for_callback gets the payload and keeps running; a job
-- parked by WaitForCallback becomes claimable again (its attempt refunded, so the re-entry
-- continues the same attempt); a handler that registered but has not parked yet finds the
-- payload when it parks or waits.
UPDATE awa.jobs SET
{{callback_wait_entry}}
            'resolved', 'resumed')))),
    callback_result = %(payload)s::jsonb,
    state = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler
                 THEN 'available'::awa.job_state ELSE 'running'::awa.job_state END,
    attempt = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler
                   THEN attempt - 1 ELSE attempt END,
    run_at = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler THEN now() ELSE run_at END,
    heartbeat_at = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler THEN NULL ELSE now() END,
    callback_id = CASE WHEN state = 'running' THEN callback_id END,
    callback_timeout_at = CASE WHEN state = 'running' THEN callback_timeout_at END,
    callback_in_handler = false
WHERE callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
RETURNING *;

-- name: heartbeat_callback
-- Extend a waiting callback's timeout.
UPDATE awa.jobs SET callback_timeout_at = now() + %(timeout)s * interval '1 second'
WHERE
{{callback_waiter}}
RETURNING *;
