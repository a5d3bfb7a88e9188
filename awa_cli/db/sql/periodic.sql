-- Periodic jobs (architecture §9; the tables are sql/0002_periodic.sql). How the leader uses them,
-- in ONE transaction per sweep:
--   periodic_due (rows locked) -> awa_cli.periodic.due_fires per row -> periodic_fire (all the
--   sweep's fire times) -> insert_each (the jobs of the new ones) -> periodic_advance (all the
--   swept rows) -> commit -> NOTIFY the queues that got jobs.
-- Then it sleeps until periodic_next_due, or until a worker's upsert or a resume wakes it
-- (periodic_wake).

-- name: periodic_upsert
-- A worker's schedules at its start, all in one statement. The definition is replaced; the
-- paused flag, created_at and the fire state are kept. next_fire_at: a new row, or one whose
-- cron or timezone changed, takes the caller's value, or now() when that is NULL (due at once:
-- the leader computes the first fire time, with the database's clock). An unchanged
-- definition is not written at all (no row version, no updated_at). A new cron or timezone
-- also moves active_since: fire times of the new expression before the change are not caught
-- up. Rows are taken in name
-- order so that workers starting together cannot deadlock. Returns the rows it wrote.
INSERT INTO awa.periodic_jobs AS p (name, definition, next_fire_at)
SELECT u.name, u.definition, coalesce(u.next_fire_at, now())
FROM unnest(%(names)s::text[], %(definitions)s::jsonb[], %(next_fire_ats)s::timestamptz[])
     AS u(name, definition, next_fire_at)
ORDER BY u.name
ON CONFLICT (name) DO UPDATE
SET definition = EXCLUDED.definition,
    updated_at = now(),
    next_fire_at = CASE
        WHEN (p.definition ->> 'cron', p.definition ->> 'timezone')
             IS DISTINCT FROM (EXCLUDED.definition ->> 'cron', EXCLUDED.definition ->> 'timezone')
        THEN EXCLUDED.next_fire_at
        ELSE p.next_fire_at
    END,
    active_since = CASE
        WHEN (p.definition ->> 'cron', p.definition ->> 'timezone')
             IS DISTINCT FROM (EXCLUDED.definition ->> 'cron', EXCLUDED.definition ->> 'timezone')
        THEN now()
        ELSE p.active_since
    END
WHERE p.definition IS DISTINCT FROM EXCLUDED.definition
RETURNING p.name, p.paused, p.created_at, p.active_since, p.last_fire_at, p.next_fire_at,
          (p.xmax = 0) AS inserted

-- name: periodic_due
-- The unpaused schedules due at %(now)s (NULL: the database's clock), oldest due first,
-- locked for this transaction; SKIP LOCKED so that a second sweep (a leader change while the
-- old leader still runs) takes other rows instead of waiting. active_since is the lower bound
-- of due_fires (the created_at argument); now is the clock the sweep must use for every row.
SELECT p.name, p.definition, p.created_at, p.last_fire_at, p.next_fire_at,
       p.active_since,
       coalesce(%(now)s::timestamptz, now()) AS now
FROM awa.periodic_jobs p
WHERE NOT p.paused AND p.next_fire_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY p.next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: periodic_fire
-- Record many fire times in one statement, the sweep's dedup: each (name, fire_at) goes into
-- awa.periodic_fires unless it is there already. One result row per input row, in input
-- order; new_fire false: this fire time already has its job (another leader, a replayed
-- sweep, or the same time twice in one call, where only the first can be new). The jobs of
-- the new fires are then inserted in the same transaction by insert_each (inserts.sql), the
-- statement every follow-up goes through: a periodic job is an ordinary job.
WITH u AS (
    SELECT *
    FROM unnest(%(names)s::text[], %(fire_ats)s::timestamptz[])
         WITH ORDINALITY AS u(name, fire_at, ord)
), t AS MATERIALIZED (
    SELECT u.*, row_number() OVER (PARTITION BY u.name, u.fire_at ORDER BY u.ord) AS nth
    FROM u
), fire AS (
    INSERT INTO awa.periodic_fires (name, fire_at)
    SELECT t.name, t.fire_at FROM t WHERE t.nth = 1 ORDER BY t.ord
    ON CONFLICT (name, fire_at) DO NOTHING
    RETURNING name, fire_at
)
SELECT t.name, t.fire_at, fire.name IS NOT NULL AS new_fire
FROM t
LEFT JOIN fire ON fire.name = t.name AND fire.fire_at = t.fire_at AND t.nth = 1
ORDER BY t.ord

-- name: periodic_advance
-- After a sweep, in its transaction: per schedule, the new next_fire_at (NULL: never again),
-- and, where it fired, its last fire time and job (NULL keeps the old value). last_fire_at never
-- moves back, so a fire time at or before it can never be due again.
UPDATE awa.periodic_jobs AS p
SET last_fire_at = greatest(p.last_fire_at, u.last_fire_at),
    next_fire_at = u.next_fire_at,
    last_job_id = coalesce(u.last_job_id, p.last_job_id)
FROM unnest(%(names)s::text[], %(last_fire_ats)s::timestamptz[],
            %(next_fire_ats)s::timestamptz[], %(last_job_ids)s::bigint[])
     AS u(name, last_fire_at, next_fire_at, last_job_id)
WHERE p.name = u.name
RETURNING p.name, p.last_fire_at, p.next_fire_at, p.last_job_id

-- name: periodic_next_due
-- When the leader must sweep next: the earliest next_fire_at of the unpaused schedules (NULL:
-- none will fire), and how many seconds from now (the database's clock) that is, so that the
-- leader sleeps by its own monotonic clock whatever its wall clock says. One index probe on
-- periodic_jobs_next_fire_idx.
SELECT min(next_fire_at) AS next_fire_at,
       extract(epoch FROM min(next_fire_at) - clock_timestamp())::float8 AS seconds
FROM awa.periodic_jobs WHERE NOT paused

-- name: periodic_list
-- `awa cron list` / Client.list_periodic: every schedule with the state of its last job (NULL
-- when that job is gone, deleted by retention).
SELECT p.name, p.definition, p.paused, p.created_at, p.updated_at, p.active_since,
       p.last_fire_at, p.next_fire_at, p.last_job_id, j.state AS last_job_state
FROM awa.periodic_jobs p
LEFT JOIN awa.jobs j ON j.id = p.last_job_id
ORDER BY p.name

-- name: periodic_get
-- One schedule, as periodic_list shows it (no row: unknown name, exit 4).
SELECT p.name, p.definition, p.paused, p.created_at, p.updated_at, p.active_since,
       p.last_fire_at, p.next_fire_at, p.last_job_id, j.state AS last_job_state
FROM awa.periodic_jobs p
LEFT JOIN awa.jobs j ON j.id = p.last_job_id
WHERE p.name = %(name)s

-- name: periodic_pause
-- No row returned: unknown name. Pausing a paused schedule is a no-op that still answers.
UPDATE awa.periodic_jobs
SET paused = true,
    updated_at = CASE WHEN paused THEN updated_at ELSE now() END
WHERE name = %(name)s
RETURNING name, paused

-- name: periodic_resume
-- Fire times while paused are skipped (active_since bounds due_fires from below), and the
-- schedule is due at once so that the leader computes its next fire time. Resuming a running
-- schedule changes nothing.
UPDATE awa.periodic_jobs
SET paused = false,
    active_since = CASE WHEN paused THEN now() ELSE active_since END,
    next_fire_at = CASE WHEN paused THEN now() ELSE next_fire_at END,
    updated_at = CASE WHEN paused THEN now() ELSE updated_at END
WHERE name = %(name)s
RETURNING name, paused

-- name: periodic_delete
-- Drops the schedule and its recorded fires (a worker whose app still defines it re-creates
-- it at its start). No row returned: unknown name.
DELETE FROM awa.periodic_jobs WHERE name = %(name)s RETURNING name

-- name: periodic_prune_fires
-- Recorded fires older than their schedule's last fire by more than %(keep)s (an interval):
-- they can never be due again (see periodic_advance). Run by the leader with retention.
DELETE FROM awa.periodic_fires f
USING awa.periodic_jobs p
WHERE f.name = p.name AND f.fire_at < p.last_fire_at - %(keep)s::interval

-- name: periodic_wake
-- Wake the maintenance leader (it LISTENs on this channel): a worker's upsert wrote schedules
-- or a schedule was resumed, so one is due at once. Sent in the writer's transaction, so it
-- arrives with the commit.
SELECT pg_notify(%(channel)s, '')
