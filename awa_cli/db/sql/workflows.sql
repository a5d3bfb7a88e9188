-- Workflows (architecture §16): the awa.workflows rows, their steps, and the transitions of
-- a workflow as a whole. A running workflow's counts are derived from its steps here; the row
-- is written only when the workflow starts, ends, is cancelled or retried.

-- fragment: wf_step_range
-- The range of the workflow w's step ids (migration 0018): a walk of the primary key, not
-- an index on workflow_id (there is none: every step's transition wrote an entry in it). A
-- workflow inserted before 0018 by an older awa has no range: the whole table.
BETWEEN coalesce(w.first_step, 0) AND coalesce(w.last_step, 9223372036854775807)

-- fragment: wf_steps_of_w
-- The steps of the workflow w, by the range of their ids.
JOIN awa.jobs AS j ON j.id {{wf_step_range}} AND j.workflow_id = w.id

-- name: wf_insert
-- The workflow's row with the range of its steps' ids (drawn first: migration 0018).
INSERT INTO awa.workflows (name, metadata, first_step, last_step)
VALUES (%(name)s, %(metadata)s::jsonb, %(first_step)s, %(last_step)s)
ON CONFLICT DO NOTHING
RETURNING id, name, state, created_at, finished_at, counts, metadata;

-- name: wf_finish
-- End the workflows of %(ids)s whose every step is terminal, after locking each (a
-- transaction-scoped advisory lock, held to commit: without it two last steps finishing at
-- once would each see the other still running), in one call: awa.workflow_finish (migration
-- 0017) checks with a snapshot taken after the locks. Returns the workflows it ended.
SELECT id, state FROM awa.workflow_finish(%(ids)s::bigint[]);

-- name: wf_get
SELECT id, name, state, created_at, finished_at, counts, metadata FROM awa.workflows
WHERE id = %(id)s;

-- name: wf_list
-- Newest first; %(state)s NULL: any state.
SELECT id, name, state, created_at, finished_at, counts, metadata FROM awa.workflows
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: wf_counts
-- Steps per state of the workflows %(ids)s (a dead-lettered step as failed).
SELECT x.workflow_id, x.state, sum(x.n)::int AS n FROM (
    SELECT j.workflow_id, j.state::text AS state, count(*) AS n
    FROM awa.workflows AS w {{wf_steps_of_w}}
    WHERE w.id = ANY (%(ids)s::bigint[]) GROUP BY j.workflow_id, j.state
    UNION ALL
    SELECT workflow_id, 'failed', count(*) FROM awa.dead_letters
    WHERE workflow_id = ANY (%(ids)s::bigint[]) GROUP BY workflow_id) AS x
GROUP BY x.workflow_id, x.state;

-- name: wf_steps
-- A workflow's steps in insertion order.
SELECT j.* FROM awa.workflows AS w {{wf_steps_of_w}}
WHERE w.id = %(id)s ORDER BY j.id;

-- name: wf_edges
-- The edges between a workflow's steps (parent, child).
SELECT d.parent_id, d.child_id FROM awa.workflows AS w {{wf_steps_of_w}}
JOIN awa.job_dependencies AS d ON d.child_id = j.id
WHERE w.id = %(id)s
ORDER BY d.child_id, d.parent_id;

-- name: wf_cancel_steps
-- Cancel every unfinished step of the workflow (a running handler is fenced by its lease).
UPDATE awa.jobs AS j SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
    deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
FROM awa.workflows AS w
WHERE w.id = %(id)s
  AND j.id {{wf_step_range}}
  AND j.workflow_id = w.id AND j.state NOT IN ('completed', 'failed', 'cancelled')
RETURNING j.*;

-- name: wf_mark
-- A workflow's state set by an operator action: cancelled (finished now, counts kept) or
-- running again (retried).
UPDATE awa.workflows SET state = %(state)s,
    finished_at = CASE WHEN %(state)s = 'running' THEN NULL ELSE now() END,
    counts = CASE WHEN %(state)s = 'running' THEN NULL ELSE %(counts)s::jsonb END
WHERE id = %(id)s
RETURNING id, name, state, created_at, finished_at, counts, metadata;

-- name: wf_retry_steps
-- Re-run the failed and cancelled steps of the workflow and so what depends on them: each
-- becomes blocked while a parent is unfinished (its failed and cancelled parents are retried
-- by the same statement, so they count as unfinished), else available.
UPDATE awa.jobs AS j SET
    pending_parents = r.pending,
    state = CASE WHEN r.pending > 0 THEN 'blocked'::awa.job_state ELSE 'available'::awa.job_state END,
    attempt = 0, run_at = now(), finalized_at = NULL, heartbeat_at = NULL, deadline_at = NULL,
    callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
FROM (
    SELECT c.id, (SELECT count(*) FROM awa.job_dependencies AS d
                  LEFT JOIN awa.jobs AS p ON p.id = d.parent_id
                  WHERE d.child_id = c.id
                    AND (p.state IS NULL OR p.state <> 'completed')) AS pending
    FROM awa.workflows AS w
    JOIN awa.jobs AS c ON c.id {{wf_step_range}} AND c.workflow_id = w.id
    WHERE w.id = %(id)s AND c.state IN ('failed', 'cancelled')
) AS r
WHERE j.id = r.id
RETURNING j.id, j.state::text AS state, j.queue;
