-- awa 0017: a workflow's end is checked in one call (architecture §16).
--
-- A transition that makes steps terminal checks, in its transaction, whether their workflows
-- are over: it takes a transaction-scoped advisory lock per workflow (so that of two last
-- steps finishing at once the second sees the first) and then looks for an unfinished step.
-- The check must run with a snapshot taken after the lock is granted, so it was a second
-- statement, and a second round trip of every finalising transaction of a workflow step (a
-- tenth of a worker's busy time in the `workflow_fan` benchmark). awa.workflow_finish does
-- both in one call: a VOLATILE function takes a fresh snapshot for each statement it runs, so
-- its check sees every transaction that committed while it waited for the lock.

-- Lock the workflows %(ids)s (in id order, held to commit), then finish those whose every
-- step is terminal: completed when every step completed, failed when one failed (a
-- dead-lettered step counts as failed), else cancelled; the final counts are kept with the
-- row. Returns the workflows it finished, with their new state.
CREATE FUNCTION awa.workflow_finish(ids bigint[]) RETURNS TABLE (id bigint, state text)
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
                        WHERE j.workflow_id = w.id GROUP BY j.state
                        UNION ALL
                        SELECT 'failed', count(*) FROM awa.dead_letters AS dl
                        WHERE dl.workflow_id = w.id HAVING count(*) > 0) AS x
                    GROUP BY x.state) AS s) AS counts
        FROM awa.workflows AS w
        WHERE w.id = ANY (ids) AND w.state = 'running'
          AND NOT EXISTS (SELECT 1 FROM awa.jobs AS j WHERE j.workflow_id = w.id
                          AND j.state NOT IN ('completed', 'failed', 'cancelled'))
    )
    UPDATE awa.workflows AS w SET
        state = CASE WHEN over.counts ? 'failed' THEN 'failed'
                     WHEN over.counts ? 'cancelled' THEN 'cancelled' ELSE 'completed' END,
        finished_at = now(),
        counts = over.counts
    FROM over WHERE w.id = over.id
    RETURNING w.id, w.state;
END $$;
