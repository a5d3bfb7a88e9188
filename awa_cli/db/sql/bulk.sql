-- Bulk operations on awa.jobs (architecture §10): retry, cancel and purge by filter, in bounded
-- batches, and cancel by unique key.
--
-- Retry and cancel are two statements per batch in ONE transaction: bulk_select_jobs locks up
-- to %(batch)s matching ids (SKIP LOCKED, id order, after the %(after)s cursor), then
-- bulk_retry_jobs / bulk_cancel_jobs changes those ids under the state guard and returns the
-- committed rows, so the outcome core can run each cancelled job's on_cancelled specs and
-- dispatch its Cancelled event. The caller moves the cursor to the last id selected and stops
-- when a batch comes back short; each batch is its own short transaction, so 100,000 jobs
-- never hold one long lock. Purge is one statement per batch (no events, no specs).

-- fragment: job_filter
-- The filters of the bulk commands and of the dashboard's jobs list, each NULL for any: the
-- queue, the kind, a tag the job carries, the ids an operator selected.
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(tag)s::text IS NULL OR %(tag)s::text = ANY (tags))
  AND (%(ids)s::bigint[] IS NULL OR id = ANY (%(ids)s::bigint[]))

-- name: bulk_select_jobs
-- Lock one batch of job ids in %(states)s (the filters of the bulk commands and of the
-- dashboard's jobs list: %(queue)s, %(kind)s, %(tag)s, %(ids)s — the ids an operator
-- selected; NULL: any), after id %(after)s, in id order.
SELECT id FROM awa.jobs
WHERE state = ANY (%(states)s::awa.job_state[])
  AND id > %(after)s::bigint
{{job_filter}}
ORDER BY id
LIMIT %(batch)s
FOR UPDATE SKIP LOCKED

-- name: bulk_count_jobs
-- How many jobs a bulk operation with these filters would touch (--dry-run);
-- %(older_than)s (seconds since finalized_at) is the purge filter, NULL for retry and cancel.
SELECT count(*) FROM awa.jobs
WHERE state = ANY (%(states)s::awa.job_state[])
{{job_filter}}
  AND (%(older_than)s::float8 IS NULL
       OR finalized_at < now() - %(older_than)s::float8 * interval '1 second')

-- name: bulk_retry_jobs
-- Operator retry (architecture §5.9) of the given failed or cancelled jobs: available again,
-- attempt 0, errors kept; fires nothing. A job whose unique key another job holds again is
-- skipped (it stays as it is), and of several selected jobs with one key only the lowest id
-- is retried, so the statement does not trip the unique index. (An insert that takes the key
-- between this check and the update makes the statement raise UniqueViolation; the caller
-- retries that batch, which then skips the job.)
UPDATE awa.jobs AS j SET
    state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
    heartbeat_at = NULL, deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
    callback_in_handler = false
WHERE j.id = ANY (%(ids)s::bigint[])
  AND j.state IN ('failed', 'cancelled')
  AND (j.unique_key IS NULL
       OR NOT ('available' = ANY (coalesce(j.unique_states, '{}')))
       OR (NOT EXISTS (SELECT 1 FROM awa.jobs AS h
                       WHERE h.unique_key = j.unique_key AND h.unique_key IS NOT NULL
                         AND h.state = ANY (h.unique_states) AND h.id <> j.id)
           AND j.id = (SELECT min(x.id) FROM awa.jobs AS x
                       WHERE x.id = ANY (%(ids)s::bigint[]) AND x.unique_key = j.unique_key
                         AND x.state IN ('failed', 'cancelled'))))
RETURNING *

-- name: bulk_cancel_jobs
-- Operator cancel (architecture §5.9) of the given jobs that are available, scheduled, retryable or
-- waiting for a callback (a waiting job's callback id dies with it). Running jobs are not
-- bulk-cancelled. Returns the cancelled rows, for the Cancelled events and on_cancelled specs.
UPDATE awa.jobs SET
    state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
    callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
WHERE id = ANY (%(ids)s::bigint[])
  AND state IN ('available', 'scheduled', 'retryable', 'waiting_external')
RETURNING *

-- name: bulk_purge_jobs
-- Delete up to %(batch)s finished jobs (completed, failed, cancelled; the others in %(states)s
-- are ignored) matching the filters, finished more than %(older_than)s seconds ago (NULL:
-- any age), never one whose rescue follow-ups are pending. Repeat until the row count is
-- below %(batch)s.
DELETE FROM awa.jobs WHERE id IN (
    SELECT id FROM awa.jobs
    WHERE state = ANY (%(states)s::awa.job_state[])
      AND state IN ('completed', 'failed', 'cancelled')
      AND rescue_pending IS NULL
    {{job_filter}}
      AND (%(older_than)s::float8 IS NULL
           OR finalized_at < now() - %(older_than)s::float8 * interval '1 second')
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED)

-- name: cancel_by_unique_key
-- Cancel the job holding %(unique_key)s, if it is not finished (running included, as for a
-- single cancel: its handler sees is_cancelled()). The lookup walks the partial unique index.
-- Returns the cancelled row, or nothing.
UPDATE awa.jobs SET
    state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
    callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
WHERE id = (SELECT id FROM awa.jobs
            WHERE unique_key = %(unique_key)s::bytea AND unique_key IS NOT NULL
              AND state = ANY (unique_states)
            LIMIT 1
            FOR UPDATE)
  AND state NOT IN ('completed', 'failed', 'cancelled')
RETURNING *
