-- Live workers (migration 0005, issue 20): each worker process keeps one row of awa.workers
-- while it runs (worker/presence.py); awa serve reads them (/workers, /kinds).

-- name: worker_register
-- At start (and again if the row was pruned while the database was away).
-- limits_digest: the [limits.NAME] tables it enforces (migration 0009, worker/fleet.py).
INSERT INTO awa.workers (id, host, pid, queues, kinds, started_at, heartbeat_at, running, version,
                         limits_digest)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(kinds)s::jsonb, now(), now(),
        %(running)s, %(version)s, %(limits_digest)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), running = excluded.running,
    queues = excluded.queues, kinds = excluded.kinds, limits_digest = excluded.limits_digest

-- name: worker_heartbeat
-- Every heartbeat_interval: one row by primary key. No row touched means it was pruned
-- (the worker registers again).
UPDATE awa.workers SET heartbeat_at = now(), running = %(running)s WHERE id = %(id)s

-- name: worker_remove
DELETE FROM awa.workers WHERE id = %(id)s

-- name: worker_prune
-- The maintenance leader, each sweep: rows of processes that stopped heartbeating.
DELETE FROM awa.workers WHERE heartbeat_at < now() - %(stale)s * interval '1 second'

-- name: workers_live
-- The live workers for the dashboard, newest first; stale rows are not shown even before
-- the leader prunes them.
SELECT id, host, pid, queues, kinds, started_at, heartbeat_at, running, version,
       extract(epoch FROM now() - heartbeat_at) AS heartbeat_age_seconds
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
