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
-- Delete terminal jobs past their retention, in a bounded batch (releases unique keys),
-- with their dependency edges. A parent is kept while any descendant of it is unfinished
-- (its output and state are what that descendant will see; architecture §16). Returns the
-- number of jobs deleted. Run after prune_plan_settings, in its transaction.
WITH gone AS (
    DELETE FROM awa.jobs WHERE id IN (
        SELECT j.id FROM awa.jobs AS j
        WHERE j.rescue_pending IS NULL AND (
            (j.state = 'completed' AND j.finalized_at < now() - %(completed)s * interval '1 second')
            OR (j.state IN ('failed', 'cancelled')
                AND j.finalized_at < now() - %(failed)s * interval '1 second'))
          AND NOT (j.has_dependents AND EXISTS (
              WITH RECURSIVE down(id) AS (
                  SELECT d.child_id FROM awa.job_dependencies AS d WHERE d.parent_id = j.id
                  UNION
                  SELECT d.child_id FROM down JOIN awa.job_dependencies AS d ON d.parent_id = down.id
              )
              SELECT 1 FROM down JOIN awa.jobs AS c ON c.id = down.id
              WHERE c.state NOT IN ('completed', 'failed', 'cancelled')))
        LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
    RETURNING id
), edges AS (
    DELETE FROM awa.job_dependencies AS d
    WHERE d.child_id IN (SELECT id FROM gone) OR d.parent_id IN (SELECT id FROM gone)
), shards AS (
    DELETE FROM awa.dependency_shards AS s WHERE s.child_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone;

-- name: prune_plan_settings
-- No JIT for the prune (transaction-local): the planner's estimate for the descendant check
-- (a recursive walk it cannot bound) is far above jit_above_cost, and compiling the plan cost
-- 500-700 ms of CPU on every sweep, against 5 ms to run it (EXPLAIN ANALYZE, a 10,000-step
-- workflow, PostgreSQL 15 with LLVM). A job queue's statements are short: JIT never pays.
SELECT set_config('jit', 'off', true);

-- name: leader_mark_worker
-- The new leader's own row(s) of awa.workers (migration 0013): the backend pid of the session
-- that holds the leader lock, so `awa doctor` can name the leader's host:pid. No row yet (the
-- worker registers at the same moment): the leader tries again shortly.
UPDATE awa.workers SET leader_backend_pid = %(backend_pid)s
WHERE host = %(host)s AND pid = %(pid)s
