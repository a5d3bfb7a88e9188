-- Liveness of running attempts.

-- name: heartbeat
-- Touch every running job of this worker in one statement; the ids returned are still ours
-- (a job missing from them was cancelled, rescued or claimed again: its handler is fenced).
-- %(progress)s carries each job's progress reported since the last write (NULL: unchanged);
-- the progress flush (worker/progress.py) runs this statement for just the jobs with news.
UPDATE awa.jobs AS j SET heartbeat_at = now(), progress = coalesce(v.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(progress)s::jsonb[]) AS v(id, lease, progress)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
RETURNING j.id;
