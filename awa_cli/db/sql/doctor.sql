-- name: doctor_statement_timeout
-- No check may hang the doctor (a lock queue, an overloaded server): each statement gets 10 s.
SET statement_timeout = '10s'

-- name: doctor_server
-- The server's version and the settings `awa doctor` judges, plus the client backends
-- connected now (this one included).
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num,
       current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('fsync') AS fsync,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved_connections,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
           AS connections_in_use

-- name: doctor_schema_versions
-- The applied migration versions; NULL rows when the ledger table does not exist yet
-- (to_regclass keeps the statement valid on an empty database).
-- can_read_ledger: the README's least-privilege role may not read it (the check then says so
-- and the others go on).
SELECT to_regclass('awa.schema_migrations') IS NOT NULL AS has_ledger,
       to_regclass('awa.jobs') IS NOT NULL AS has_jobs,
       CASE WHEN to_regclass('awa.schema_migrations') IS NOT NULL
            THEN has_table_privilege('awa.schema_migrations', 'SELECT') END AS can_read_ledger

-- name: doctor_applied_migrations
SELECT version FROM awa.schema_migrations ORDER BY version

-- name: doctor_leader
-- Sessions holding the maintenance leader's advisory lock in this database. A bigint key
-- shows in pg_locks as classid (high 32 bits) and objid (low 32 bits) with objsubid 1.
-- The live worker whose row names that session (migration 0013: the leader writes its lock
-- session's backend pid there) gives the leader's host:pid.
SELECT l.pid, a.application_name, a.client_addr::text AS client_addr,
       extract(epoch FROM now() - a.backend_start)::float8 AS held_for,
       w.host AS worker_host, w.pid AS worker_pid
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
LEFT JOIN LATERAL (
    SELECT host, pid FROM awa.workers
    WHERE leader_backend_pid = l.pid
      AND heartbeat_at >= now() - %(stale)s * interval '1 second'
    ORDER BY heartbeat_at DESC LIMIT 1) AS w ON true
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = %(key)s::bigint

-- name: doctor_stuck_rescues
-- Jobs a live leader would have rescued long ago: running with a heartbeat (or a deadline)
-- older than the threshold, or waiting past their callback timeout by as much.
SELECT count(*) FILTER (WHERE state = 'running'
                          AND heartbeat_at < now() - %(threshold)s * interval '1 second')::int
           AS stale_heartbeats,
       count(*) FILTER (WHERE state = 'running'
                          AND deadline_at < now() - %(threshold)s * interval '1 second')::int
           AS past_deadline,
       count(*) FILTER (WHERE state = 'waiting_external'
                          AND callback_timeout_at < now() - %(threshold)s * interval '1 second')::int
           AS expired_callbacks,
       count(*)::int AS overdue,
       extract(epoch FROM now() - min(overdue_since))::float8 AS oldest_age
FROM awa.jobs,
     LATERAL (SELECT CASE WHEN state = 'running' THEN least(heartbeat_at, deadline_at)
                          ELSE callback_timeout_at END AS overdue_since) AS o
WHERE state IN ('running', 'waiting_external')
  AND overdue_since < now() - %(threshold)s * interval '1 second'

-- name: doctor_oldest_available
-- The job that has waited longest to be claimed: available and due. Served by the claim
-- index's partial predicate (state) and a scan over run_at within it.
SELECT id, queue, extract(epoch FROM now() - run_at)::float8 AS age
FROM awa.jobs
WHERE state = 'available' AND run_at <= now()
ORDER BY run_at
LIMIT 1

-- name: doctor_table_stats
-- Live and dead tuples, size and the last (auto)vacuum of every table in schema awa; the
-- per-table autovacuum_enabled storage option, when someone turned it off.
SELECT s.relname AS table_name, s.n_live_tup::bigint AS live, s.n_dead_tup::bigint AS dead,
       pg_total_relation_size(s.relid)::bigint AS size_bytes,
       greatest(s.last_autovacuum, s.last_vacuum) AS last_vacuum,
       coalesce('autovacuum_enabled=false' = ANY (c.reloptions)
                OR 'autovacuum_enabled=off' = ANY (c.reloptions), false) AS autovacuum_off
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.schemaname = 'awa'
ORDER BY s.n_dead_tup DESC

-- name: doctor_long_transactions
-- Transactions in this database open longer than the threshold (other than this session),
-- and whether each holds back vacuum's horizon (it has a snapshot or a transaction id).
SELECT pid, state, application_name, client_addr::text AS client_addr,
       extract(epoch FROM now() - xact_start)::float8 AS age,
       (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AS holds_horizon
FROM pg_stat_activity
WHERE datname = current_database()
  AND pid <> pg_backend_pid()
  AND xact_start < now() - %(threshold)s * interval '1 second'
ORDER BY xact_start

-- name: doctor_leader_unnamed
-- doctor_leader for a schema without awa.workers' leader column (before migration 0013).
SELECT l.pid, a.application_name, a.client_addr::text AS client_addr,
       extract(epoch FROM now() - a.backend_start)::float8 AS held_for,
       NULL::text AS worker_host, NULL::int AS worker_pid
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint) = %(key)s::bigint

-- name: doctor_failing_claims
-- Live workers whose claims fail (migration 0013: each writes since when and why in its row).
SELECT host, pid, claim_error,
       extract(epoch FROM now() - claim_failing_since)::float8 AS failing_for
FROM awa.workers
WHERE heartbeat_at >= now() - %(stale)s * interval '1 second'
  AND claim_failing_since IS NOT NULL
ORDER BY claim_failing_since

-- name: doctor_held_jobs
-- Running jobs per worker that holds them (attempted_by = host:pid), with the freshest job
-- heartbeat and whether a live row of awa.workers stands for that worker.
SELECT j.attempted_by, count(*)::int AS jobs, min(j.id) AS first_id,
       extract(epoch FROM now() - max(j.heartbeat_at))::float8 AS heartbeat_age,
       EXISTS (SELECT 1 FROM awa.workers AS w
               WHERE w.host || ':' || w.pid = j.attempted_by
                 AND w.heartbeat_at >= now() - %(stale)s * interval '1 second') AS live_row
FROM awa.jobs AS j
WHERE j.state = 'running'
GROUP BY j.attempted_by
ORDER BY count(*) DESC

-- name: listen_channel
-- LISTEN on one channel; {channel} is an identifier composed with psycopg.sql by the caller.
LISTEN {channel}

-- name: unlisten_channel
UNLISTEN {channel}

-- name: notify_channel
SELECT pg_notify(%(channel)s, %(payload)s)
