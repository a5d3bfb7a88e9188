-- Liveness of running attempts.

-- fragment: lock_running_in_id_order
-- The running rows among %(ids)s, locked in id order before the statement that follows
-- changes them (it must also require j.id IN (SELECT id FROM locked), so that it touches
-- only rows this CTE locked first). Two statements that lock a worker's running rows this
-- way (the heartbeat and the finaliser) never deadlock each other whatever plan the
-- planner picks: with statistics that count no running row (a deep backlog analysed before
-- its drain) it walks a partial index of running rows, in heartbeat_at order, and the
-- order of the id list alone no longer decides the order of the locks.
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
