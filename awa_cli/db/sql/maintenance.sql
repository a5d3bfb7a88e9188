-- Maintenance: leader election (a session-level advisory lock held on a dedicated
-- connection, so it dies with the process or the connection) and retention.

-- name: leader_try_lock
SELECT pg_try_advisory_lock(%(key)s);

-- name: leader_keepalive
-- The lock lives as long as this connection: touch it before each sweep.
SELECT 1;

-- name: leader_unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: prune
-- Delete terminal jobs past their retention, in a bounded batch (releases unique keys).
DELETE FROM awa.jobs WHERE id IN (
    SELECT id FROM awa.jobs
    WHERE rescue_pending IS NULL AND (
        (state = 'completed' AND finalized_at < now() - %(completed)s * interval '1 second')
        OR (state IN ('failed', 'cancelled') AND finalized_at < now() - %(failed)s * interval '1 second'))
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED);

-- name: leader_mark_worker
-- The new leader's own row(s) of awa.workers (migration 0013): the backend pid of the session
-- that holds the leader lock, so `awa doctor` can name the leader's host:pid. No row yet (the
-- worker registers at the same moment): the leader tries again shortly.
UPDATE awa.workers SET leader_backend_pid = %(backend_pid)s
WHERE host = %(host)s AND pid = %(pid)s
