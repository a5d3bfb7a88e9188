-- awa 0002: periodic jobs (architecture §9): one row per schedule, and one row per fire time enqueued.

-- The definition comes from code or config and is upserted by each worker at start; the
-- paused flag and the fire state (last_fire_at, next_fire_at, last_job_id) belong to the
-- database and survive redeploys.
CREATE TABLE awa.periodic_jobs (
    name          text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,200}$'),
    -- {"cron", "timezone", "catch_up", "kind", "args", "options"} (awa_cli.periodic.Schedule)
    definition    jsonb NOT NULL CHECK (jsonb_typeof(definition) = 'object'),
    paused        boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- no fire time before it is ever due: the schedule's creation, its last resume (fire
    -- times while paused are skipped, not caught up) or the last change of its cron or
    -- timezone (times the old expression did not have are not caught up)
    active_since  timestamptz NOT NULL DEFAULT now(),
    last_fire_at  timestamptz,
    -- when the leader must look at the schedule next (NULL: it never fires again); a new or
    -- changed definition, or a resume, sets it to now(): the leader computes the fire time
    next_fire_at  timestamptz,
    -- no foreign key: retention deletes old jobs, the schedule keeps its history
    last_job_id   bigint
);

-- The leader's two questions, "which schedules are due" and "when is the next one due",
-- are both answered from this index alone; paused schedules are not in it.
CREATE INDEX periodic_jobs_next_fire_idx ON awa.periodic_jobs (next_fire_at) WHERE NOT paused;

-- Exactly one job per (schedule, fire time), held by the database itself.
--
-- The leader enqueues a fire time in one transaction that (1) inserts (name, fire_at) here
-- with ON CONFLICT DO NOTHING, (2) inserts the job only if that row was new, and (3) advances
-- the schedule's row, which the sweep holds FOR UPDATE. A leader killed before its commit
-- leaves nothing behind (all three roll back together); two leaders at once (a leadership
-- change while the old one still runs) serialise on the schedule's row lock and on this
-- primary key, and the second finds the fire taken. So the guarantee never rests on the
-- leader's memory, on its clock, or on how it computed the fire times.
--
-- A table of its own rather than the job's unique_key: the job stays an ordinary job, so a
-- schedule may still give it unique_opts of its own (both cannot share the one key column),
-- and deleting old jobs by retention does not release the fire. Rows are pruned once they are
-- well behind the schedule's last fire (a fire time at or before last_fire_at is never due
-- again: due fire times are computed strictly after it and it never moves back), and go with
-- their schedule when it is deleted.
CREATE TABLE awa.periodic_fires (
    name      text NOT NULL REFERENCES awa.periodic_jobs (name) ON DELETE CASCADE,
    fire_at   timestamptz NOT NULL,
    fired_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, fire_at)
);
