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

-- name: jobs_dead_tuples
-- awa.jobs's dead row versions as the cumulative statistics count them (each backend reports
-- its own within about a second of committing), and whether this role may vacuum the table:
-- it owns it or is a member of its owner (a superuser is), or, from PostgreSQL 17, holds
-- MAINTAIN on it. [maintenance] vacuum_dead_tuples (awa_cli/maintenance.py).
SELECT coalesce(s.n_dead_tup, 0) AS dead,
       pg_has_role(c.relowner, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END AS may_vacuum
FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = 'awa.jobs'::regclass;

-- name: vacuum_jobs
-- The leader's vacuum of awa.jobs (on a session of its own, outside any transaction): every
-- claim and every completion leaves a dead row version and a dead entry in the claim index,
-- and a deep backlog's claims walk more of them the further the drain goes, until a vacuum
-- removes them; autovacuum looks at most once a minute (autovacuum_naptime). SKIP_LOCKED:
-- when autovacuum (or anyone) is already vacuuming it, this returns at once; INDEX_CLEANUP ON:
-- the dead index entries are what the claim pays for, so they are removed even when few heap
-- pages hold dead rows.
VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) awa.jobs;
