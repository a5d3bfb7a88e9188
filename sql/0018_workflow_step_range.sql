-- awa 0018: a workflow's steps are found by their id range, not by an index on workflow_id
-- (architecture §16).
--
-- A workflow's steps get their ids in one draw, when it is inserted, so they lie between the
-- workflow's first_step and last_step (a step's id is drawn even when a held unique key
-- skips its row; ids other producers drew at the same moment may lie between them too: the
-- reads check workflow_id as well). Every read of a workflow's steps (its counts, its steps
-- and edges, an operator's cancel and retry, the end check) now walks that range of the
-- primary key.
--
-- The two indexes on awa.jobs (workflow_id) that the reads used are gone. No transition of a
-- step is a HOT update (each one changes the state, which other indexes cover), so every
-- row version of a step wrote an entry in each: jobs_workflow_idx on the insert, the
-- unblock, the claim and the completion; jobs_workflow_open_idx on the first three. Of the
-- 13 index entries a step wrote from its unblock to its completion, 5 were theirs (a plain
-- job writes 6 from its claim to its completion: `workflow_fan`, docs/performance.md).
--
-- And the end check is cheaper. It looked for an unfinished step through
-- jobs_workflow_open_idx, whose entries for one workflow are in heap order, the steps'
-- inserted (now dead) row versions first: in a running fan-out it stepped over up to one
-- dead entry per step before it reached the join. It now walks the range from the highest
-- id down. A workflow's steps are numbered parents before children (awa.Workflow adds them
-- so) and workers claim in id order within a priority, so the step with the highest id is
-- usually the last to finish (a fan-in's join, a chain's last link, a fan-out's last leaf)
-- and the first row read.
--
-- A workflow inserted without a range (by an awa older than this migration, during a
-- rolling deploy) is read over the whole table: correct, and slower.

ALTER TABLE awa.workflows ADD COLUMN first_step bigint, ADD COLUMN last_step bigint;

UPDATE awa.workflows AS w SET first_step = r.first_step, last_step = r.last_step
FROM (
    SELECT workflow_id, min(id) AS first_step, max(id) AS last_step FROM (
        SELECT workflow_id, id FROM awa.jobs WHERE workflow_id IS NOT NULL
        UNION ALL
        SELECT workflow_id, id FROM awa.dead_letters WHERE workflow_id IS NOT NULL) AS s
    GROUP BY workflow_id
) AS r
WHERE w.id = r.workflow_id;

DROP INDEX IF EXISTS awa.jobs_workflow_open_idx;
DROP INDEX IF EXISTS awa.jobs_workflow_idx;

-- The newest unfinished step of workflow w (steps first_step to last_step), NULL when none
-- is. The range is walked backwards by the primary key and the walk stops at the first
-- unfinished step: the planner, expecting a few rows in a range it cannot see, would rather
-- read the whole range and sort it (a bitmap scan, 800 buffers in a 10,000-step fan-out
-- against 3), so this one statement is planned without either.
CREATE FUNCTION awa.workflow_open_step(w bigint, first_step bigint, last_step bigint)
    RETURNS bigint LANGUAGE plpgsql STABLE  -- PL/pgSQL: its plan is cached, a SQL function's not
    SET enable_bitmapscan = off SET enable_sort = off
    AS $$
BEGIN
    RETURN (
        SELECT j.id FROM awa.jobs AS j
        WHERE j.id BETWEEN coalesce(first_step, 0) AND coalesce(last_step, 9223372036854775807)
          AND j.workflow_id = w AND j.state NOT IN ('completed', 'failed', 'cancelled')
        ORDER BY j.id DESC
        LIMIT 1);
END $$;

-- Lock the workflows `ids` (in id order, held to commit), then finish those whose every
-- step is terminal: completed when every step completed, failed when one failed (a
-- dead-lettered step counts as failed), else cancelled; the final counts are kept with the
-- row. Returns the workflows it finished, with their new state. A VOLATILE function takes
-- a fresh snapshot for each statement: the check sees every transaction that committed
-- while it waited for the lock (0017).
CREATE OR REPLACE FUNCTION awa.workflow_finish(ids bigint[]) RETURNS TABLE (id bigint, state text)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(1635213682, (w % 2147483647)::int)
    FROM unnest(ids) AS w ORDER BY w;
    RETURN QUERY
    WITH over AS (
        SELECT w.id,
               (SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb) FROM (
                    SELECT x.state, sum(x.n)::int AS n FROM (
                        SELECT j.state::text AS state, count(*) AS n FROM awa.jobs AS j
                        WHERE j.id BETWEEN coalesce(w.first_step, 0)
                                       AND coalesce(w.last_step, 9223372036854775807)
                          AND j.workflow_id = w.id
                        GROUP BY j.state
                        UNION ALL
                        SELECT 'failed', count(*) FROM awa.dead_letters AS dl
                        WHERE dl.workflow_id = w.id HAVING count(*) > 0) AS x
                    GROUP BY x.state) AS s) AS counts
        FROM awa.workflows AS w
        WHERE w.id = ANY (ids) AND w.state = 'running'
          AND awa.workflow_open_step(w.id, w.first_step, w.last_step) IS NULL
    )
    UPDATE awa.workflows AS w SET
        state = CASE WHEN over.counts ? 'failed' THEN 'failed'
                     WHEN over.counts ? 'cancelled' THEN 'cancelled' ELSE 'completed' END,
        finished_at = now(),
        counts = over.counts
    FROM over WHERE w.id = over.id
    RETURNING w.id, w.state;
END $$;
