-- awa 0016: a limited job keeps the slot it was claimed under (architecture §13, issue 29).
--
-- The limited claim counts, under each key's lock, the slots of the key in use: running
-- jobs of the key, and those waiting inside their handler. awa.limit_usage (0010) counted
-- them by scanning every running row and computing its key, so each claim paid for every
-- running job of the fleet, and for the dead index entries of every job that was running
-- since the last vacuum (219 buffer hits per claim in `drain_limited`).
--
-- Now the claim that starts an attempt writes the slot it counted the job under into the
-- row: awa.jobs.limit_slot, the limit's name and the key joined by chr(31), or '' when no
-- limit selects the job (the plain claim, claim.sql). A partial index holds exactly the rows
-- that use a slot (a slot set, and running or waiting inside the handler), so the count of a
-- key is a lookup of that key: rows leave the index as they leave running, whichever door
-- they leave by (finalise, rescue, cancel, callback), with nothing to decrement.
--
-- A job counts against the slot it was claimed under: a [limits] change (which the fleet
-- check makes explicit: awa worker --accept-limits-change) applies to the jobs claimed after
-- it, not to the attempts already running.
--
-- Rows claimed before this migration, or by a worker of an earlier version still running
-- during a rolling deploy, have no slot (NULL). They are counted as before, by computing
-- their key, from a second partial index that holds only them: empty once no such attempt
-- runs, so it costs one index page per count. An earlier worker calls awa.limit_usage too
-- (the body below replaces 0010's, same signature), so both versions count each other's
-- jobs during the deploy.
--
-- awa.dead_letters gets the column too (a dead letter keeps every column of its job, and the
-- moves copy them by name); a slot counts only while its row is running, so a dead letter's,
-- or a retried job's, counts for nothing until its next claim writes a new one.
--
-- Applying this file twice is harmless: IF NOT EXISTS, CREATE OR REPLACE.

ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS limit_slot text;
ALTER TABLE awa.dead_letters ADD COLUMN IF NOT EXISTS limit_slot text;

-- the rows that hold a slot of a limit's key
CREATE INDEX IF NOT EXISTS jobs_limit_slot_idx ON awa.jobs (limit_slot)
    WHERE limit_slot <> ''
      AND (state = 'running' OR (state = 'waiting_external' AND callback_in_handler));

-- attempts started without a slot recorded: before this migration, or by an earlier worker
CREATE INDEX IF NOT EXISTS jobs_limit_unslotted_idx ON awa.jobs (id)
    WHERE limit_slot IS NULL
      AND (state = 'running' OR (state = 'waiting_external' AND callback_in_handler));

CREATE OR REPLACE FUNCTION awa.limit_usage(
    lock_class integer, pair_names text[], pair_keys text[],
    l_names text[], l_kinds text[], l_queues text[], l_sources text[], l_paths text[],
    l_rate_w double precision[]
) RETURNS TABLE (limit_name text, key text, running bigint, starts bigint, at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_class, s.h)
    FROM (SELECT DISTINCT hashtext(u.n || chr(31) || u.k) AS h
          FROM unnest(pair_names, pair_keys) AS u(n, k)
          ORDER BY 1) s;
    -- a new snapshot: after the locks
    RETURN QUERY
    WITH lim AS (
        SELECT l.name, l.kind, l.queue, l.source, l.path::text[] AS path, l.rate_w
        FROM unnest(l_names, l_kinds, l_queues, l_sources, l_paths, l_rate_w)
            AS l(name, kind, queue, source, path, rate_w)
    ), pairs AS (
        SELECT DISTINCT u.n, u.k, u.n || chr(31) || u.k AS slot
        FROM unnest(pair_names, pair_keys) AS u(n, k)
    ), clock AS (
        SELECT clock_timestamp() AS t
    ), slotted AS (
        -- one lookup per key in jobs_limit_slot_idx. A lateral count per slot, not one
        -- `limit_slot = ANY (...)`: with statistics from before the slots were written (all
        -- NULL), the planner took the ANY for one row and scanned every running job through
        -- jobs_heartbeat_idx instead; per slot, that scan would be paid once per key
        SELECT p.slot, n.c
        FROM pairs p CROSS JOIN LATERAL (
            SELECT count(*) AS c FROM awa.jobs j
            WHERE j.limit_slot = p.slot AND j.limit_slot <> ''
              AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.callback_in_handler))
        ) n
    ), unslotted AS (
        -- jobs_limit_unslotted_idx: keyed as 0010 keyed every running job
        SELECT coalesce(lk.name, lq.name) || chr(31) ||
               coalesce(j.concurrency_key,
                        CASE coalesce(lk.source, lq.source) WHEN 'kind' THEN j.kind
                             WHEN 'queue' THEN j.queue
                             ELSE j.args #>> coalesce(lk.path, lq.path) END, '') AS slot,
               count(*) AS c
        FROM awa.jobs j
        LEFT JOIN lim lk ON lk.kind = j.kind
        LEFT JOIN lim lq ON lk.name IS NULL AND lq.kind IS NULL AND lq.queue = j.queue
        WHERE j.limit_slot IS NULL
          AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.callback_in_handler))
          AND coalesce(lk.name, lq.name) IS NOT NULL
        GROUP BY 1
    ), held AS (
        SELECT h.slot, sum(h.c) AS c
        FROM (SELECT * FROM slotted UNION ALL SELECT * FROM unslotted) h
        GROUP BY 1
    )
    SELECT p.n, p.k, coalesce(h.c, 0)::bigint,
           CASE WHEN l.rate_w IS NULL THEN 0::bigint ELSE (
               SELECT count(*) FROM awa.limit_starts s
               WHERE s.limit_name = p.n AND s.key = p.k
                 AND s.started_at > clock.t - l.rate_w * interval '1 second') END,
           clock.t
    FROM pairs p
    CROSS JOIN clock
    LEFT JOIN lim l ON l.name = p.n
    LEFT JOIN held h ON h.slot = p.slot;
END $$;
