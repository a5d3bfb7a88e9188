-- Live workers (migration 0005, issue 20): each worker process keeps one row of awa.workers
-- while it runs (worker/presence.py); awa serve reads them (/workers, /kinds).

-- name: worker_register
-- At start (and again if the row was pruned while the database was away).
-- limits_digest: the [limits.NAME] tables it enforces (migration 0009, worker/fleet.py).
INSERT INTO awa.workers (id, host, pid, queues, kinds, started_at, heartbeat_at, running, version,
                         claim_failing_since, claim_error, limits_digest)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(kinds)s::jsonb, now(), now(),
        %(running)s, %(version)s, to_timestamp(%(failing_since)s::float8), %(claim_error)s::text,
        %(limits_digest)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), running = excluded.running,
    queues = excluded.queues, kinds = excluded.kinds,
    claim_failing_since = excluded.claim_failing_since, claim_error = excluded.claim_error,
    limits_digest = excluded.limits_digest

-- name: worker_heartbeat
-- Every heartbeat_interval: one row by primary key. No row touched means it was pruned
-- (the worker registers again).
-- Claims failing (migration 0013): since when (unix seconds) and the last error; NULL: they work.
UPDATE awa.workers SET heartbeat_at = now(), running = %(running)s,
    claim_failing_since = to_timestamp(%(failing_since)s::float8),
    claim_error = %(claim_error)s::text
WHERE id = %(id)s

-- name: worker_remove
-- A worker that stops deletes its row, and marks its queues seen now (awa.queues.updated_at):
-- a queue nothing else keeps listed stays on the lists for a while after its last worker
-- left (queue_list).
WITH gone AS (DELETE FROM awa.workers WHERE id = %(id)s RETURNING queues)
UPDATE awa.queues SET updated_at = now()
WHERE name IN (SELECT jsonb_object_keys(g.queues) FROM gone AS g)

-- name: worker_prune
-- The maintenance leader, each sweep: rows of processes that stopped heartbeating (their
-- queues marked seen now, as worker_remove does).
WITH gone AS (
    DELETE FROM awa.workers WHERE heartbeat_at < now() - %(stale)s * interval '1 second'
    RETURNING queues
)
UPDATE awa.queues SET updated_at = now()
WHERE name IN (SELECT jsonb_object_keys(g.queues) FROM gone AS g)

-- name: workers_live
-- The live workers for the dashboard, newest first; stale rows are not shown even before
-- the leader prunes them.
SELECT id, host, pid, queues, kinds, started_at, heartbeat_at, running, version,
       extract(epoch FROM now() - heartbeat_at) AS heartbeat_age_seconds,
       claim_failing_since, claim_error
FROM awa.workers
WHERE heartbeat_at >= now() - %(stale)s * interval '1 second'
ORDER BY started_at DESC, id

-- name: kinds_with_available
-- Kinds with jobs that could run now, per queue (jobs_active_idx, index-only), for the kinds
-- page's "no live worker handles this" flag.
SELECT queue, kind, count(*) AS available
FROM awa.jobs
WHERE state IN ('available', 'retryable', 'scheduled') AND run_at <= now()
GROUP BY queue, kind
ORDER BY queue, kind
