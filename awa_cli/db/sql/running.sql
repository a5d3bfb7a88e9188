-- Liveness of running attempts.

-- fragment: lock_running_in_id_order
-- The running rows among %(ids)s, locked in id order before the statement that follows
-- changes them (it must also require j.id IN (SELECT id FROM locked), so that it touches
-- only rows this CTE locked first). Two statements that lock a worker's running rows this
-- way (the heartbeat and the finaliser) never deadlock each other whatever plan the
-- planner picks. Without it the locks follow the plan: an index scan of jobs_state_id_idx
-- meets the rows in id order, but a bitmap heap scan, or a hash join probed from the table's
-- side, meets them in physical order (the fair run's drain_deep logged the deadlock).
WITH locked AS (
    SELECT id FROM awa.jobs
    WHERE id = ANY (%(ids)s::bigint[]) AND state = 'running'
    ORDER BY id
    FOR NO KEY UPDATE
)

-- name: heartbeat
-- Touch every running job of this worker in one statement; the ids returned are still ours
-- (a job missing from them was cancelled, rescued or claimed again: its handler is fenced).
-- %(progress)s carries each job's progress reported since the last write (NULL: unchanged);
-- the progress flush (worker/progress.py) runs this statement for just the jobs with news.
-- The rows are locked first, in id order (the fragment above), as the finaliser locks them.
{{lock_running_in_id_order}}
UPDATE awa.jobs AS j SET heartbeat_at = now(), progress = coalesce(v.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(progress)s::jsonb[]) AS v(id, lease, progress)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
  AND j.id IN (SELECT id FROM locked)
RETURNING j.id;
