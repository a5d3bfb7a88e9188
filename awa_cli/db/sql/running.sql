-- Liveness of running attempts.

-- name: heartbeat
-- Touch every running job of this worker in one statement; the ids returned are still ours
-- (a job missing from them was cancelled, rescued or claimed again: its handler is fenced).
UPDATE awa.jobs AS j SET heartbeat_at = now()
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS v(id, lease)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
RETURNING j.id;
