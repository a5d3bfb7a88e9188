-- Queue controls (architecture §10): pause and resume, and the list of known queues.
-- A queue with no row in awa.queues is not paused.

-- name: queue_pause
-- Pause a queue (upsert). Pausing a paused queue changes nothing but updated_at: the first
-- pause's time and actor are kept. Running jobs are not touched; inserts still work.
INSERT INTO awa.queues AS q (name, paused, paused_at, paused_by, updated_at)
VALUES (%(queue)s::text, true, now(), %(actor)s::text, now())
ON CONFLICT (name) DO UPDATE SET
    paused = true,
    paused_at = CASE WHEN q.paused THEN q.paused_at ELSE now() END,
    paused_by = CASE WHEN q.paused THEN q.paused_by ELSE excluded.paused_by END,
    updated_at = now()
RETURNING q.name AS queue, q.paused, q.paused_at, q.paused_by, q.dead_letter, q.updated_at

-- name: queue_resume
-- Resume a queue (upsert), and wake the workers that serve it at commit (the NOTIFY is
-- delivered on commit), so its backlog starts without waiting for a poll.
WITH resumed AS (
    INSERT INTO awa.queues AS q (name, paused, paused_at, paused_by, updated_at)
    VALUES (%(queue)s::text, false, NULL, NULL, now())
    ON CONFLICT (name) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL,
        updated_at = now()
    RETURNING q.name, q.paused, q.paused_at, q.paused_by, q.dead_letter, q.updated_at
)
SELECT r.name AS queue, r.paused, r.paused_at, r.paused_by, r.dead_letter, r.updated_at
FROM resumed AS r, LATERAL (SELECT pg_notify(awa.channel_for(r.name), '')) AS woke

-- name: queue_get
-- One queue's control row (no row: the queue was never paused nor registered).
SELECT name AS queue, paused, paused_at, paused_by, dead_letter, updated_at FROM awa.queues
WHERE name = %(queue)s::text

-- name: queue_paused_names
-- The paused queues (for a worker that caches them, and for the dashboard).
SELECT name FROM awa.queues WHERE paused ORDER BY name

-- name: queue_register
-- A worker announces its queues when it starts (%(names)s, and %(dead_letter)s: one flag per
-- name, dead_letter_enabled() of its config), so that `awa queue list` knows them before they
-- have jobs and every process dead-letters a queue's jobs alike. A new name gets a row; an
-- existing row keeps its pause and takes the flag (written only when it changes).
INSERT INTO awa.queues AS q (name, dead_letter)
SELECT DISTINCT ON (n.name) n.name, n.dead_letter
FROM unnest(%(names)s::text[], %(dead_letter)s::boolean[]) AS n(name, dead_letter)
ORDER BY n.name
ON CONFLICT (name) DO UPDATE SET dead_letter = excluded.dead_letter, updated_at = now()
    WHERE q.dead_letter IS DISTINCT FROM excluded.dead_letter

-- name: queue_dead_letter_names
-- The queues announced with dead-lettering on.
SELECT name FROM awa.queues WHERE dead_letter ORDER BY name

-- name: queue_list
-- Every known queue with its paused flag: the rows of awa.queues, the queues that have
-- runnable jobs, and the names the caller passes (its config). The runnable queues are found
-- with a skip scan over jobs_claim_idx (one index probe per distinct queue), never by
-- scanning awa.jobs. Queues whose jobs are all running or finished show only once a worker
-- has registered them (queue_register) or the config names them.
--
-- A row of awa.queues is forgotten (left out; the row stays, and a worker that serves the
-- queue again brings it back) once nothing keeps it: it is not paused, holds no unfinished
-- job (jobs_active_idx) and no dead letter, no live worker (heartbeat within 30 s,
-- defaults.WORKER_STALENESS) serves it, and it was last seen (updated_at: announced with a
-- changed flag, paused or resumed, or left by its last worker) more than 24 hours ago
-- (defaults.QUEUE_FORGET_AFTER). Literals, not parameters, so every caller gets one rule.
WITH RECURSIVE runnable(queue) AS (
    (SELECT queue FROM awa.jobs
     WHERE state IN ('available', 'scheduled', 'retryable')
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM awa.jobs AS j
            WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.queue > r.queue
            ORDER BY j.queue LIMIT 1)
    FROM runnable AS r
    WHERE r.queue IS NOT NULL
), names AS (
    SELECT k.name FROM awa.queues AS k
    WHERE k.paused
       OR k.updated_at >= now() - interval '24 hours'
       OR EXISTS (SELECT 1 FROM awa.jobs AS j
                  WHERE j.queue = k.name AND j.state NOT IN ('completed', 'failed', 'cancelled'))
       OR EXISTS (SELECT 1 FROM awa.dead_letters AS d WHERE d.queue = k.name)
       OR EXISTS (SELECT 1 FROM awa.workers AS w
                  WHERE w.queues ->> k.name IS NOT NULL
                    AND w.heartbeat_at >= now() - interval '30 seconds')
    UNION SELECT queue FROM runnable WHERE queue IS NOT NULL
    UNION SELECT unnest(coalesce(%(configured)s::text[], '{}'))
)
SELECT n.name AS queue, coalesce(q.paused, false) AS paused, q.paused_at, q.paused_by,
       coalesce(q.dead_letter, false) AS dead_letter, q.updated_at
FROM names AS n LEFT JOIN awa.queues AS q ON q.name = n.name
ORDER BY n.name
