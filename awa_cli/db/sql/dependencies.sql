-- Dependencies between jobs (architecture §16): inserting children with their parent edges,
-- and the outcome core's settling of children when a parent's transition makes it terminal.
-- A child's pending_parents counts the parents it still waits for; each parent's terminal
-- transition takes it down once, in that transition's transaction (fenced: only rows the
-- guarded statement changed are settled).

-- name: dep_lock_parents
-- Lock the parents a child names (in id order: concurrent inserts never deadlock) and flag
-- them has_dependents, so each one's next transition settles its children. The lock orders
-- the insert with a parent's own transition: a transition already under way commits first
-- and the state returned here is the committed one; a later one sees the child's edge.
WITH locked AS (
    SELECT id, state, has_dependents, metadata ->> 'awa.step' AS step FROM awa.jobs
    WHERE id = ANY (%(ids)s::bigint[])
    ORDER BY id
    FOR NO KEY UPDATE
), flagged AS (
    UPDATE awa.jobs AS j SET has_dependents = true
    FROM locked WHERE j.id = locked.id AND NOT locked.has_dependents
)
SELECT id, state::text AS state, step FROM locked;

-- name: dep_dead_parents
-- Named parents that were moved to the dead-letter queue (a dead letter counts as failed).
SELECT id FROM awa.dead_letters WHERE id = ANY (%(ids)s::bigint[]);

-- name: dep_draw_ids
-- Ids for jobs inserted with their edges: drawn first so the edges can name them.
SELECT nextval(pg_get_serial_sequence('awa.jobs', 'id')) FROM generate_series(1, %(n)s);

-- name: dep_insert_jobs
-- Jobs with their dependency columns (blocked children, workflow steps), each with its own
-- options; RETURNING the ids inserted (a held unique key skips its row).
INSERT INTO awa.jobs AS j (id, kind, queue, args, state, priority, max_attempts, run_at,
                           deadline_duration, metadata, tags, unique_key, unique_states,
                           ordering_key, concurrency_key, pending_parents, on_parent_failure,
                           has_dependents, workflow_id, errors, finalized_at)
OVERRIDING SYSTEM VALUE
SELECT u.id, u.kind, u.queue, u.args,
       CASE WHEN u.state IS NOT NULL THEN u.state::awa.job_state
            WHEN u.run_at > now() THEN 'scheduled'::awa.job_state
            ELSE 'available'::awa.job_state END,
       u.priority, u.max_attempts, coalesce(u.run_at, now()), u.deadline_duration, u.metadata,
       ARRAY(SELECT jsonb_array_elements_text(u.tags)), u.unique_key,
       CASE WHEN u.unique_states IS NOT NULL
            THEN ARRAY(SELECT jsonb_array_elements_text(u.unique_states))::awa.job_state[] END,
       u.ordering_key, u.concurrency_key, u.pending, u.policy, u.has_dependents, u.workflow_id,
       CASE WHEN u.error IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(u.error) END,
       CASE WHEN u.state = 'cancelled' THEN now() END
FROM unnest(%(ids)s::bigint[], %(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[],
            %(priorities)s::int[], %(max_attempts)s::int[], %(run_ats)s::timestamptz[],
            %(deadline_durations)s::float8[], %(metadata)s::jsonb[], %(tags)s::jsonb[],
            %(unique_keys)s::bytea[], %(unique_states)s::jsonb[], %(ordering_keys)s::text[],
            %(concurrency_keys)s::text[], %(states)s::text[], %(pendings)s::int[],
            %(policies)s::text[], %(has_dependents)s::bool[], %(workflow_ids)s::bigint[],
            %(errors)s::jsonb[])
     WITH ORDINALITY AS u(id, kind, queue, args, priority, max_attempts, run_at,
                          deadline_duration, metadata, tags, unique_key, unique_states,
                          ordering_key, concurrency_key, state, pending, policy,
                          has_dependents, workflow_id, error, ord)
ORDER BY u.ord
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
RETURNING j.id;

-- name: dep_insert_edges
-- The parent -> child edges of the jobs just inserted.
INSERT INTO awa.job_dependencies (parent_id, child_id)
SELECT * FROM unnest(%(parents)s::bigint[], %(children)s::bigint[])
ON CONFLICT DO NOTHING;

-- name: dep_jobs_by_id
-- The rows just inserted, in id order.
SELECT * FROM awa.jobs WHERE id = ANY (%(ids)s::bigint[]) ORDER BY id;

-- name: dep_settle
-- The children of parents that just became terminal (%(ids)s with their %(states)s), in the
-- parents' transaction. A child waiting on them loses one pending parent per completed parent
-- (per terminal parent with on_parent_failure = 'run'); at zero it becomes available (or
-- scheduled: its run_at still applies). With 'cancel' (the default) a failed or cancelled
-- parent cancels the child, reason "parent <id> <state>"; the caller settles the cancelled
-- children's own children next, so the cancellation is transitive. A wide child (migration
-- 0015) counts its parents on its shard rows, and only a shard taken to zero here takes its
-- pending_parents down (by the shard's counted parents): its row is not touched otherwise,
-- unless a parent failed. Shard rows are locked in (child, shard) order, then children in id
-- order (no deadlock between two parents' transactions); only blocked children change, so a
-- settled child is never settled twice.
-- Every step is linear in the rows it handles whatever the planner estimates: every lookup
-- is by key (LATERAL ... OFFSET 0 keeps the planner from a scan when a table's statistics
-- predate a burst of new edges), and the per-child figures are one grouping of the per-shard
-- rows, never a join of two CTEs (which the planner makes a nested loop when the statistics
-- say "one row": a 10,000-wide fan-out then took 14 s instead of 0.2 s).
WITH pe AS (
    -- per child and parent shard: how many of these parents completed, how many did not,
    -- the first that did not and its state (the unnest is not a CTE, so its size is known)
    SELECT d.child_id, awa.dependency_shard(p.id) AS shard,
           count(*) FILTER (WHERE p.state = 'completed') AS done,
           count(*) FILTER (WHERE p.state <> 'completed') AS bad,
           min(p.id) FILTER (WHERE p.state <> 'completed') AS bad_parent,
           (array_agg(p.state ORDER BY p.id) FILTER (WHERE p.state <> 'completed'))[1] AS bad_state
    FROM unnest(%(ids)s::bigint[], %(states)s::text[]) AS p(id, state)
    CROSS JOIN LATERAL (  -- by primary key, whatever the (often stale) statistics say
        SELECT d.child_id FROM awa.job_dependencies AS d WHERE d.parent_id = p.id OFFSET 0
    ) AS d
    GROUP BY d.child_id, awa.dependency_shard(p.id)
), sl AS (
    -- a wide child's shard rows, locked in (child, shard) order, each by primary key; every
    -- terminal parent counts there (a failed one only matters to a 'run' child: a 'cancel'
    -- child is cancelled below, and a retry counts its shards afresh)
    SELECT s.child_id, s.shard, s.pending, x.dec
    FROM (SELECT child_id, shard, done + bad AS dec FROM pe ORDER BY child_id, shard) AS x
    CROSS JOIN LATERAL (
        SELECT s.child_id, s.shard, s.pending FROM awa.dependency_shards AS s
        WHERE s.child_id = x.child_id AND s.shard = x.shard
        FOR NO KEY UPDATE
    ) AS s
), su AS (
    UPDATE awa.dependency_shards AS s SET pending = greatest(s.pending - sl.dec, 0)
    FROM sl
    WHERE s.child_id = sl.child_id AND s.shard = sl.shard AND s.pending > 0
    RETURNING s.child_id, CASE WHEN s.pending = 0 THEN s.counted ELSE 0 END AS released
), e AS (
    -- per child: its parents here, whether it is wide (has shard rows) and the parents of
    -- the shards this statement closed; one grouping of the three row sources
    SELECT child_id, sum(done) AS done, sum(bad) AS bad, min(bad_parent) AS bad_parent,
           (array_agg(bad_state ORDER BY bad_parent) FILTER (WHERE bad_parent IS NOT NULL))[1]
               AS bad_state,
           bool_or(wide) AS wide, sum(released) AS released
    FROM (
        SELECT child_id, done, bad, bad_parent, bad_state, false AS wide, 0 AS released FROM pe
        UNION ALL
        SELECT child_id, 0, 0, NULL, NULL, true, 0 FROM sl
        UNION ALL
        SELECT child_id, 0, 0, NULL, NULL, true, released FROM su
    ) AS x
    GROUP BY child_id
), n AS (
    -- lock the blocked children whose row changes, in id order, each by primary key: a
    -- narrow child, a wide one with a shard closed, any one with a failed parent; with the
    -- decrement and the cancel flag only (the child's counter is read by the UPDATE below
    -- from the row it locked, the latest version, never from this statement's snapshot)
    SELECT o.child_id, o.bad_parent, o.bad_state,
           CASE WHEN o.wide THEN o.released
                WHEN j.on_parent_failure = 'run' THEN o.done + o.bad ELSE o.done END AS dec,
           j.on_parent_failure <> 'run' AND o.bad > 0 AS cancel
    FROM (SELECT * FROM e WHERE NOT e.wide OR e.released > 0 OR e.bad > 0
          ORDER BY e.child_id) AS o
    CROSS JOIN LATERAL (
        SELECT j.id, j.on_parent_failure FROM awa.jobs AS j
        WHERE j.id = o.child_id AND j.state = 'blocked'
        FOR NO KEY UPDATE
    ) AS j
)
UPDATE awa.jobs AS j SET
    pending_parents = greatest(j.pending_parents - n.dec, 0),
    state = CASE WHEN n.cancel THEN 'cancelled'::awa.job_state
                 WHEN j.pending_parents - n.dec > 0 THEN 'blocked'::awa.job_state
                 WHEN j.run_at > now() THEN 'scheduled'::awa.job_state
                 ELSE 'available'::awa.job_state END,
    finalized_at = CASE WHEN n.cancel THEN now() END,
    errors = CASE WHEN n.cancel
                  THEN j.errors || jsonb_build_array(jsonb_build_object(
                      'error', 'parent ' || n.bad_parent || ' ' || n.bad_state,
                      'attempt', j.attempt, 'at', now(), 'terminal', true,
                      'parent', n.bad_parent))
                  ELSE j.errors END
FROM n
WHERE j.id = n.child_id  -- blocked: n locked it so (no state test here: the key decides the plan)
RETURNING j.id, j.state, j.queue, j.has_dependents, j.workflow_id;

-- name: dep_count_wide
-- The shard rows of the wide children among %(ids)s, counted afresh after a retry moved
-- them (sql/0015_dependency_shards.sql).
SELECT awa.dependency_count(%(ids)s::bigint[]);

-- name: dep_reopen
-- A retried job (%(ids)s, already made runnable by its retry) and the descendants its
-- failure cancelled: each of those becomes blocked again (the retried ones too, while a
-- parent of theirs is unfinished), its pending parents counted afresh in this transaction.
-- A child with on_parent_failure = 'run' that the old outcome released and that has not
-- started (available, scheduled, retryable) is blocked again too: it waits for the new
-- attempt of its parent. One that already started (running, waiting, terminal) is left as
-- it is. A retried step that its workflow's retry left blocked is made available when
-- nothing it waits for is left (a "run" step whose parent was dead-lettered). The UPDATE
-- re-checks the state on the row it locks, so a child a worker claimed after this
-- statement's snapshot is never moved back (fenced like every transition).
WITH RECURSIVE down(id) AS (
    SELECT unnest(%(ids)s::bigint[])
    UNION
    SELECT d.child_id FROM down JOIN awa.job_dependencies AS d ON d.parent_id = down.id
    JOIN awa.jobs AS c ON c.id = d.child_id
    WHERE (c.state = 'cancelled' AND (c.errors -> -1) ? 'parent')
       OR (c.on_parent_failure = 'run' AND c.state IN ('available', 'scheduled', 'retryable'))
), counted AS (
    SELECT down.id,
           (SELECT count(*) FROM awa.job_dependencies AS d
            LEFT JOIN awa.jobs AS p ON p.id = d.parent_id
            WHERE d.child_id = down.id
              AND (d.parent_id IN (SELECT id FROM down)  -- retried or blocked again here
                   OR (c.on_parent_failure = 'run'
                       AND p.state NOT IN ('completed', 'failed', 'cancelled'))
                   OR (c.on_parent_failure IS DISTINCT FROM 'run'
                       AND (p.state IS NULL OR p.state <> 'completed')))) AS pending
    FROM down JOIN awa.jobs AS c ON c.id = down.id
)
UPDATE awa.jobs AS j SET
    state = CASE WHEN counted.pending > 0 THEN 'blocked'::awa.job_state
                 WHEN j.state IN ('cancelled', 'blocked') THEN 'available'::awa.job_state
                 ELSE j.state END,
    pending_parents = counted.pending,
    attempt = CASE WHEN j.id <> ALL (%(ids)s::bigint[]) AND j.state = 'cancelled' THEN 0
                   ELSE j.attempt END,
    run_at = CASE WHEN j.state = 'cancelled' THEN now() ELSE j.run_at END,
    finalized_at = NULL
FROM counted
WHERE j.id = counted.id
  AND (j.id <> ALL (%(ids)s::bigint[]) OR EXISTS (
      SELECT 1 FROM awa.job_dependencies AS d WHERE d.child_id = j.id))
  AND (j.id = ANY (%(ids)s::bigint[]) OR j.state = 'cancelled'
       OR (j.on_parent_failure = 'run' AND j.state IN ('available', 'scheduled', 'retryable')))
RETURNING j.id, j.state::text AS state, j.queue, j.workflow_id;

-- fragment: dep_parent_state
-- The parent d.parent_id as a child's settling and its handler see it: live (its output once
-- completed), dead-lettered (failed) or pruned (deleted); by primary key, one row.
CROSS JOIN LATERAL (
    SELECT p.state::text AS state, p.metadata ->> 'awa.step' AS step,
           CASE WHEN p.state = 'completed' THEN p.output END AS output
    FROM awa.jobs AS p WHERE p.id = d.parent_id
    UNION ALL
    SELECT 'failed', dl.metadata ->> 'awa.step', NULL::jsonb
    FROM awa.dead_letters AS dl WHERE dl.id = d.parent_id
    UNION ALL
    SELECT 'deleted', NULL, NULL::jsonb
    LIMIT 1
) AS x

-- name: dep_parents_of
-- A job's parents with their states (a dead-lettered one as failed), step names and outputs.
-- Each parent is looked up by primary key (LATERAL ... LIMIT 1), whatever the statistics say
-- of a table whose rows just changed state en masse.
SELECT d.parent_id AS id, x.state, x.step, x.output
FROM awa.job_dependencies AS d
{{dep_parent_state}}
WHERE d.child_id = %(id)s
ORDER BY d.parent_id;

-- name: dep_children_of
-- A job's children with their states.
SELECT d.child_id AS id, c.state::text AS state, c.metadata ->> 'awa.step' AS step
FROM awa.job_dependencies AS d JOIN awa.jobs AS c ON c.id = d.child_id
WHERE d.parent_id = %(id)s
ORDER BY d.child_id;

-- fragment: dep_page_rows
-- The rest of a job's relations page after its FROM d (the related ids): each related job's
-- kind, state (a dead-lettered one 'failed (dead letter)', a pruned one 'deleted') and step,
-- by primary key; the first %(limit)s by id.
CROSS JOIN LATERAL (
    SELECT j.kind, j.state::text AS state, j.metadata ->> 'awa.step' AS step
    FROM awa.jobs AS j WHERE j.id = d.id
    UNION ALL
    SELECT dl.kind, 'failed (dead letter)', dl.metadata ->> 'awa.step'
    FROM awa.dead_letters AS dl WHERE dl.id = d.id
    UNION ALL
    SELECT NULL, 'deleted', NULL
    LIMIT 1
) AS x
ORDER BY d.id
LIMIT %(limit)s

-- name: dep_parents_page
-- The first %(limit)s parents of a job by id, for its page: kind, state (a dead-lettered one
-- 'failed (dead letter)', a pruned one 'deleted'), step; total: how many parents it has.
SELECT d.id, x.kind, x.state, x.step,
       (SELECT count(*) FROM awa.job_dependencies WHERE child_id = %(id)s)::int AS total
FROM (SELECT parent_id AS id FROM awa.job_dependencies WHERE child_id = %(id)s) AS d
{{dep_page_rows}};

-- name: dep_children_page
-- The first %(limit)s children of a job by id, as dep_parents_page; total: how many it has.
SELECT d.id, x.kind, x.state, x.step,
       (SELECT count(*) FROM awa.job_dependencies WHERE parent_id = %(id)s)::int AS total
FROM (SELECT child_id AS id FROM awa.job_dependencies WHERE parent_id = %(id)s) AS d
{{dep_page_rows}};

-- name: dep_job_links
-- The workflow (id, name, step) and batch (member's batch_id, or a callback's metadata) of a
-- job, live or dead-lettered; no row: no such job.
SELECT j.workflow_id, w.name AS workflow_name, j.metadata ->> 'awa.step' AS step,
       j.batch_id, j.metadata -> 'awa.batch_id' AS meta_batch_id,
       j.metadata ->> 'awa.batch_callback' AS batch_callback
FROM (
    SELECT workflow_id, batch_id, metadata FROM awa.jobs WHERE id = %(id)s
    UNION ALL
    SELECT workflow_id, batch_id, metadata FROM awa.dead_letters WHERE id = %(id)s
    LIMIT 1
) AS j
LEFT JOIN awa.workflows AS w ON w.id = j.workflow_id;
