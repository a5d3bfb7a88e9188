-- awa 0015: a wide fan-in counts its parents on sharded counter rows (architecture §16).
--
-- A child waits for its parents through awa.jobs.pending_parents, taken down in each
-- parent's finalising transaction (sql: dep_settle). For a child with a few parents that is
-- one row update per finalising batch. For a child with thousands (a 10,000-to-1 fan-in) it
-- made the child's row a lock that every finalising transaction of every parent waited on,
-- until the previous one's durable commit: the worker's two parallel completion flushes ran
-- one after the other through the whole fan-in (`workflow_fan`, docs/performance.md).
--
-- So a child with at least awa.dependency_shard_min() parents is *wide*: its parents are
-- counted in awa.dependency_shards, one row per (child, shard), a parent in the shard
-- awa.dependency_shard(parent id) (runs of 16 consecutive ids, as batch members: a worker's
-- finalising batch is a run of ids and touches one or two shard rows, and the worker routes a
-- workflow step's result to the flush loop of its shard, so its two loops never wait on one
-- shard row). A wide child's own pending_parents is exact when it is counted (at insert, at a
-- retry) and then moves by whole shards: only the statement that takes a shard's pending to
-- zero touches the child's row, and takes the shard's `counted` parents off it at once.
-- Because the shard row is locked by the statement that counts in it, "this shard is done" is
-- exact, and because every shard closer then updates the child's row, exactly one
-- transaction sees its pending_parents reach 0: the one that unblocks it. Within a statement the shard rows are
-- locked in (child, shard) order before any child row (dep_settle).
--
-- The shards are written by awa.dependency_count(children): at insert (the trigger below,
-- whatever inserted the edges: the Python insert paths or awa.enqueue), and after a retry
-- counts a child's pending parents afresh (dep_reopen, wf_retry_steps). A narrow child has no
-- shard rows and counts its parents as before.

CREATE TABLE awa.dependency_shards (
    child_id bigint NOT NULL,
    shard    smallint NOT NULL,
    pending  integer NOT NULL CHECK (pending >= 0),  -- this shard's parents not yet done
    counted  integer NOT NULL CHECK (counted >= 0),  -- pending when the child was counted
    PRIMARY KEY (child_id, shard)
) WITH (fillfactor = 50);  -- room on the page: the counter updates stay HOT

CREATE FUNCTION awa.dependency_shard(parent bigint) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ((parent / 16) % 16)::smallint $$;

-- How many parents make a child wide: 64, or the setting awa.dependency_shard_min (a
-- positive integer; the tests set it to 1 to drive every child through the shards).
CREATE FUNCTION awa.dependency_shard_min() RETURNS integer
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(nullif(current_setting('awa.dependency_shard_min', true), '')::integer, 64) $$;

-- Count the pending parents of the blocked wide children among `children` afresh, on their
-- shard rows, and set each one's pending_parents to the sum (exact, as for a narrow child). A child that is not
-- blocked, or not wide, has its shard rows (if any) removed: it counts nothing. A parent is
-- pending as dep_reopen counts it: with on_parent_failure 'run' while not terminal, else
-- while not completed (a parent no longer in awa.jobs counts as pending then, as there).
CREATE FUNCTION awa.dependency_count(children bigint[]) RETURNS void
    LANGUAGE sql VOLATILE AS $$
    DELETE FROM awa.dependency_shards WHERE child_id = ANY (children);
    WITH wide AS (
        SELECT j.id, j.on_parent_failure FROM awa.jobs AS j
        WHERE j.id = ANY (children) AND j.state = 'blocked'
          AND (SELECT count(*) FROM awa.job_dependencies AS d WHERE d.child_id = j.id)
              >= awa.dependency_shard_min()
    ), counted AS (
        SELECT w.id, awa.dependency_shard(d.parent_id) AS shard,
               count(*) FILTER (WHERE CASE WHEN w.on_parent_failure = 'run'
                                           THEN p.state NOT IN ('completed', 'failed', 'cancelled')
                                           ELSE p.state IS NULL OR p.state <> 'completed' END)
                   AS pending
        FROM wide AS w
        JOIN awa.job_dependencies AS d ON d.child_id = w.id
        LEFT JOIN awa.jobs AS p ON p.id = d.parent_id
        GROUP BY w.id, awa.dependency_shard(d.parent_id)
    ), written AS (
        INSERT INTO awa.dependency_shards (child_id, shard, pending, counted)
        SELECT id, shard, pending, pending FROM counted
    )
    UPDATE awa.jobs AS j SET pending_parents = o.pending
    FROM (SELECT id, sum(pending)::integer AS pending FROM counted GROUP BY id) AS o
    WHERE j.id = o.id;
$$;

-- Edges are inserted once per child, all of its parents in one statement, after the child's
-- row: count the wide ones among the children just given parents. SECURITY DEFINER (the
-- schema owner's rights, a fixed search_path): a producer with the documented grants
-- (docs/enqueue-from-anywhere.md) inserts children with thousands of parents without any
-- grant on the shard rows, and what it can reach is the count of the children whose edges
-- it inserted, which it writes as their true count.
CREATE FUNCTION awa.dependencies_added() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    wide bigint[];
BEGIN
    SELECT array_agg(child_id) INTO wide FROM (
        SELECT child_id FROM added GROUP BY child_id
        HAVING count(*) >= awa.dependency_shard_min()) AS w;
    IF wide IS NOT NULL THEN
        PERFORM awa.dependency_count(wide);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER job_dependencies_added AFTER INSERT ON awa.job_dependencies
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION awa.dependencies_added();
