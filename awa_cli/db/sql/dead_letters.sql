-- The dead-letter queue (architecture §10, §15.2): awa.dead_letters holds jobs moved out of
-- awa.jobs, with their id and every column they had, plus dead_at and dead_reason.
--
-- Rows move between the two tables by column NAME: to_jsonb(row) merged with the changed
-- columns, rebuilt with jsonb_populate_record as the other table's row type. A column added to
-- both tables by a later migration is carried without touching these statements (a column
-- added to awa.jobs only is caught by tests/integration/db/test_migrations.py). Each move is one statement
-- (a DELETE feeding an INSERT, or an INSERT feeding a DELETE), so no transaction ever sees a
-- job in neither table or in both.
--
-- Bounded batches: the filtered forms take %(batch)s and lock with SKIP LOCKED; the caller
-- repeats them, one short transaction per batch, until a batch comes back short.

-- name: dead_letter_move
-- Move failed jobs into the DLQ: %(ids)s with one reason each in %(reasons)s (exhausted,
-- terminal_error, rescued, callback_failed, manual). The outcome core runs it in the
-- transaction that failed them. With %(only_flagged)s only jobs of queues announced with
-- dead-lettering on (awa.queues.dead_letter) move, for a caller that has no config to ask;
-- without it the caller has decided. Only failed rows move, and never one whose rescue
-- follow-ups are still pending (rescue_pending: the follow-up sweep finds those in awa.jobs).
-- Returns the dead letters.
WITH moved AS (
    DELETE FROM awa.jobs AS j
    USING unnest(%(ids)s::bigint[], %(reasons)s::text[]) AS v(id, reason)
    WHERE j.id = v.id AND j.state = 'failed' AND j.rescue_pending IS NULL
      AND (NOT %(only_flagged)s::boolean
           OR EXISTS (SELECT 1 FROM awa.queues AS q WHERE q.name = j.queue AND q.dead_letter))
    RETURNING j.*, v.reason AS awa_dead_reason
)
INSERT INTO awa.dead_letters
SELECT d.*
FROM moved, LATERAL jsonb_populate_record(NULL::awa.dead_letters,
    to_jsonb(moved) || jsonb_build_object('dead_at', now(), 'dead_reason', moved.awa_dead_reason)) AS d
RETURNING *

-- name: dead_letter_finalize
-- A worker's failing attempts straight into the DLQ, for the batched finalise (jobs without
-- follow-up specs, on an autocommit connection): one statement does the guarded transition
-- (id, run_lease, state running: a stale attempt changes nothing) and the move, so the job
-- is failed and dead-lettered in the same transaction without an extra commit. Per attempt:
-- %(ids)s, %(leases)s, %(errors)s (the error entry to append, or NULL) and %(reasons)s
-- (exhausted or terminal_error), %(progress)s (the attempt's latest progress JSON, or NULL:
-- the row's stays). The row is what the batched FINALIZE makes of a failure
-- (state failed, finalized, heartbeat, deadline and callback cleared, output kept). Returns
-- the dead letters; their job rows are the committed rows for the Exhausted events.
WITH moved AS (
    DELETE FROM awa.jobs AS j
    USING unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(errors)s::jsonb[],
                 %(reasons)s::text[], %(progress)s::jsonb[]) AS v(id, lease, error, reason, progress)
    WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
    RETURNING j.*, v.error AS awa_error, v.reason AS awa_dead_reason, v.progress AS awa_progress
)
INSERT INTO awa.dead_letters
SELECT d.*
FROM moved, LATERAL jsonb_populate_record(NULL::awa.dead_letters,
    to_jsonb(moved) || jsonb_build_object(
        'state', 'failed',
        'errors', CASE WHEN moved.awa_error IS NULL THEN moved.errors
                       ELSE moved.errors || jsonb_build_array(moved.awa_error) END,
        'heartbeat_at', NULL::timestamptz,
        'deadline_at', NULL::timestamptz,
        'finalized_at', now(),
        'callback_id', NULL::uuid,
        'callback_timeout_at', NULL::timestamptz,
        'callback_in_handler', false,
        'progress', coalesce(moved.awa_progress, moved.progress),
        'dead_at', now(),
        'dead_reason', moved.awa_dead_reason)) AS d
RETURNING *

-- name: dead_letter_move_failed
-- Operator move (`awa dlq move`): up to %(batch)s failed jobs of %(queue)s / %(kind)s (NULL:
-- any) into the DLQ with reason 'manual', each with an error entry saying so (and %(note)s,
-- the operator's --reason, when given). Repeat until it moves fewer than %(batch)s.
WITH picked AS (
    SELECT id FROM awa.jobs
    WHERE state = 'failed' AND rescue_pending IS NULL
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM awa.jobs AS j USING picked WHERE j.id = picked.id RETURNING j.*
)
INSERT INTO awa.dead_letters
SELECT d.*
FROM moved, LATERAL jsonb_populate_record(NULL::awa.dead_letters,
    to_jsonb(moved) || jsonb_build_object(
        'dead_at', now(),
        'dead_reason', 'manual',
        'errors', moved.errors || jsonb_build_array(jsonb_build_object(
            'error', 'moved to the dead-letter queue' || coalesce(': ' || %(note)s::text, ''),
            'attempt', moved.attempt,
            'at', now())))) AS d
RETURNING id

-- name: dead_letter_get
SELECT * FROM awa.dead_letters WHERE id = %(id)s::bigint

-- name: dead_letter_list
-- Newest first, optionally one queue and/or kind.
SELECT * FROM awa.dead_letters
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
ORDER BY dead_at DESC, id DESC
LIMIT %(limit)s

-- name: dead_letter_depth
-- Dead letters per queue, and the total in the row where is_total (queue NULL): one row per
-- queue plus the total row, which is there (0) even when the DLQ is empty.
SELECT queue, count(*) AS n, grouping(queue) = 1 AS is_total
FROM awa.dead_letters
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY GROUPING SETS ((queue), ())
ORDER BY is_total DESC, queue

-- name: dead_letter_count
-- How many dead letters a purge or retry with these filters would touch (--dry-run). The
-- filters are those of dead_letter_select / dead_letter_purge; all NULL counts all.
SELECT count(*) FROM awa.dead_letters
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY (%(ids)s::bigint[]))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(older_than)s::float8 IS NULL OR dead_at < now() - %(older_than)s::float8 * interval '1 second')

-- name: dead_letter_select
-- One batch of a filtered retry: lock up to %(batch)s dead letters after id %(after)s, in id
-- order, and give their ids to dead_letter_retry in the same transaction. The id cursor moves
-- past dead letters a retry skips (their unique key is held again), so the loop ends; start
-- with after = 0 and stop when fewer than %(batch)s come back.
SELECT id FROM awa.dead_letters
WHERE id > %(after)s::bigint
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(older_than)s::float8 IS NULL OR dead_at < now() - %(older_than)s::float8 * interval '1 second')
ORDER BY id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED

-- name: dead_letter_retry
-- Put dead letters back into awa.jobs under their own id: available (scheduled when
-- %(run_at)s is in the future), attempt 0, errors kept plus an entry 'retried from the
-- dead-letter queue' with the attempt it had reached, the callback and attempt state
-- cleared, run_lease kept (the next claim fences anything older). %(queue)s, %(priority)s and
-- %(run_at)s override when not NULL (architecture §10 retry_from_dlq). A dead letter whose unique
-- key is held again by a job in awa.jobs, or that a concurrent operation holds, is skipped and
-- stays in the DLQ: only the rows inserted are deleted. Returns the jobs as inserted; the
-- insert trigger wakes the workers of their queues.
WITH picked AS (
    SELECT * FROM awa.dead_letters WHERE id = ANY (%(ids)s::bigint[])
    FOR UPDATE SKIP LOCKED
), inserted AS (
    INSERT INTO awa.jobs OVERRIDING SYSTEM VALUE
    SELECT r.*
    FROM picked AS p, LATERAL jsonb_populate_record(NULL::awa.jobs,
        (to_jsonb(p) - 'dead_at' - 'dead_reason') || jsonb_build_object(
            'queue', coalesce(%(queue)s::text, p.queue),
            'priority', coalesce(%(priority)s::smallint, p.priority),
            'state', CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END,
            'run_at', coalesce(%(run_at)s::timestamptz, now()),
            'attempt', 0,
            'errors', p.errors || jsonb_build_array(jsonb_build_object(
                'error', 'retried from the dead-letter queue', 'attempt', p.attempt, 'at', now())),
            'heartbeat_at', NULL::timestamptz,
            'deadline_at', NULL::timestamptz,
            'callback_id', NULL::uuid,
            'callback_timeout_at', NULL::timestamptz,
            'callback_in_handler', false,
            'callback_result', NULL::jsonb,
            'rescue_pending', NULL::text,
            'finalized_at', NULL::timestamptz,
            -- its batch counted it as failed when it was dead-lettered: it comes back alone
            'batch_id', NULL::bigint,
            'metadata', p.metadata - 'awa.batch_id')) AS r
    ON CONFLICT DO NOTHING
    RETURNING *
), removed AS (
    DELETE FROM awa.dead_letters AS d USING inserted WHERE d.id = inserted.id
)
SELECT * FROM inserted

-- name: dead_letter_purge
-- Delete up to %(batch)s dead letters matching the filters (%(ids)s, %(queue)s, %(kind)s,
-- %(older_than)s seconds since dead_at; NULL: any). The caller refuses to run with no filter
-- unless the operator said --all. Repeat until the row count is below %(batch)s.
DELETE FROM awa.dead_letters WHERE id IN (
    SELECT id FROM awa.dead_letters
    WHERE (%(ids)s::bigint[] IS NULL OR id = ANY (%(ids)s::bigint[]))
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(older_than)s::float8 IS NULL
           OR dead_at < now() - %(older_than)s::float8 * interval '1 second')
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED)

-- name: dead_letter_prune
-- Retention ([maintenance] dead_letter_retention, seconds): the leader deletes up to %(batch)s
-- of the oldest dead letters past it per statement, walking dead_letters_dead_at_idx.
DELETE FROM awa.dead_letters WHERE id IN (
    SELECT id FROM awa.dead_letters
    WHERE dead_at < now() - %(retention)s::float8 * interval '1 second'
    ORDER BY dead_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED)
