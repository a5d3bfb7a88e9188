-- The limit-aware claim (architecture §13, §15.1): concurrency keys, rate limits, round-robin
-- between keys and priority aging. Used only for a queue that a [limits.NAME] can select
-- jobs of, or whose [queues.NAME] priority_aging is set; every other queue keeps the plain
-- claim_by_queue (claim.sql), unchanged.
--
-- Two statements on the claim connection (awa_cli/outcomes/claims.py), no transaction:
--
-- 1. claim_limited_candidates: the queue's runnable jobs, each with the limit that selects
--    it and its key, ranked within its key (row_number() OVER (PARTITION BY limit, key)),
--    best rank first: every key's first job before any key's second, so one key's backlog
--    cannot delay another key's first job. Keys already at max_running or out of rate
--    budget (as this statement's snapshot sees them) are left out. Nothing is locked. The
--    claimer keeps up to CANDIDATES_PER_SCAN of them and takes a chunk per claim.
-- 2. claim_limited_take: awa.limit_usage (migration 0010) takes pg_advisory_xact_lock per
--    (limit, key) of the chunk, in one sorted order (no deadlock between claimers), held
--    until the statement commits, then counts with a NEW snapshot, taken after the locks:
--    it sees every claim of these keys committed by anyone who held a lock before us, and
--    nobody can claim them until we commit. The statement keeps for each key only as many
--    candidates as max_running and the rate budget leave, locks those still runnable
--    (SKIP LOCKED: a row claimed meanwhile is re-checked at its latest version) in order
--    until it has enough, claims them, and logs their starts (at the locks' time, so starts
--    are ordered as the lock orders the claims).
--
-- So a key can never run more than max_running jobs, nor start more than N in a window,
-- whatever the number of claimers, processes and hosts: the count and the claim of one key
-- are serialised by its lock, and the count is taken after the lock.
--
-- A slot is a job of the key that is running, or waiting inside its handler
-- (waiting_external with callback_in_handler: it returns to running without a claim). The
-- take stores the slot it claims a job under in awa.jobs.limit_slot (the limit's name and the
-- key joined by chr(31); '' from the plain claim), and awa.limit_usage counts a key by
-- looking its slot up in a partial index of the rows that hold one (migration 0016). A
-- rescued, finished or cancelled attempt leaves running and so leaves that index: its slot
-- is free, with nothing to decrement.
--
-- The limits come as parallel arrays (awa_cli/limits.py ClaimPlan.params): name, kind,
-- queue, key source ('args', 'kind' or 'queue'), args path (a text[] literal), max_running,
-- rate count and rate window in seconds (NULL: no rate). A kind limit wins over a queue one.

-- fragment: claim_limits
-- The body of the CTE lim: the claim's limits, unnested from the parameters (the ranking of
-- step 1 and claim_limited_take of step 3 read the same).
    SELECT l.name, l.kind, l.queue, l.source, l.path::text[] AS path, l.max_running, l.rate_n,
           l.rate_w
    FROM unnest(%(l_names)s::text[], %(l_kinds)s::text[], %(l_queues)s::text[],
                %(l_sources)s::text[], %(l_paths)s::text[], %(l_max)s::int[],
                %(l_rate_n)s::int[], %(l_rate_w)s::float8[])
        AS l(name, kind, queue, source, path, max_running, rate_n, rate_w)

-- fragment: limited_ranking_from
-- The limits of the claim (unnested from the parameters) and the head of the ranking
-- scan, up to its FROM: both candidate statements rank the same way, over other rows.
WITH lim AS (
{{claim_limits}}
), waiting AS MATERIALIZED (  -- narrow rows for the ranking's sort
    -- the limit that selects a job: its kind's (lk), else its queue's (lq); at most one each
    SELECT j.id, j.run_at, coalesce(lk.name, lq.name) AS limit_name,
           coalesce(lk.max_running, lq.max_running) AS max_running,
           coalesce(lk.rate_n, lq.rate_n) AS rate_n,
           CASE WHEN coalesce(lk.name, lq.name) IS NOT NULL THEN
               coalesce(j.concurrency_key,
                        CASE coalesce(lk.source, lq.source) WHEN 'kind' THEN j.kind
                             WHEN 'queue' THEN j.queue
                             ELSE j.args #>> coalesce(lk.path, lq.path) END, '') END AS key,
           GREATEST(1, j.priority - CASE WHEN %(aging)s::float8 > 0
                THEN floor(extract(epoch FROM now() - j.run_at) / %(aging)s::float8)::int
                ELSE 0 END) AS eff

-- fragment: limit_held
-- The body of the CTE held: the slots in use per slot (the limit's name and the key joined
-- by chr(31), as the take stores them in awa.jobs.limit_slot, migration 0016): running jobs,
-- and those waiting inside their handler, counted from the partial index of the rows that
-- hold a slot; the attempts started without one (before 0016, or by an earlier worker
-- during a deploy) are keyed as the claim keys them, from the index that holds only them.
    SELECT h.slot, sum(h.running) AS running
    FROM (SELECT j.limit_slot AS slot, count(*) AS running
          FROM awa.jobs j
          WHERE j.limit_slot <> ''
            AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.callback_in_handler))
          GROUP BY 1
          UNION ALL
          SELECT coalesce(lk.name, lq.name) || chr(31) ||
                 coalesce(j.concurrency_key,
                          CASE coalesce(lk.source, lq.source) WHEN 'kind' THEN j.kind
                               WHEN 'queue' THEN j.queue
                               ELSE j.args #>> coalesce(lk.path, lq.path) END, ''),
                 count(*)
          FROM awa.jobs j
          LEFT JOIN lim lk ON lk.kind = j.kind
          LEFT JOIN lim lq ON lk.name IS NULL AND lq.kind IS NULL AND lq.queue = j.queue
          WHERE j.limit_slot IS NULL
            AND (j.state = 'running' OR (j.state = 'waiting_external' AND j.callback_in_handler))
            AND coalesce(lk.name, lq.name) IS NOT NULL
          GROUP BY 1) h
    GROUP BY 1

-- fragment: limited_ranking
-- The rest of the ranking after its FROM: the selecting limit per job, the keys' round
-- robin and the order (shared by claim_limited_candidates and claim_limited_arrivals).
    LEFT JOIN lim lk ON lk.kind = j.kind
    LEFT JOIN lim lq ON lk.name IS NULL AND lq.kind IS NULL AND lq.queue = j.queue
    WHERE j.queue = %(queue)s AND j.state IN ('available', 'scheduled', 'retryable')
      AND j.run_at <= now()
      -- a paused queue yields nothing, as in claim_by_queue
      AND NOT EXISTS (SELECT 1 FROM awa.queues AS q WHERE q.name = %(queue)s AND q.paused)
), held AS (
{{limit_held}}
), started AS (
    SELECT s.limit_name, s.key, count(*) AS starts
    FROM awa.limit_starts s JOIN lim l ON l.name = s.limit_name
    WHERE l.rate_n IS NOT NULL AND s.started_at > clock_timestamp() - l.rate_w * interval '1 second'
    GROUP BY 1, 2
), ranked AS (
    SELECT w.*, CASE WHEN w.limit_name IS NULL THEN 1
                     -- partitioned by a hash of (limit, key): the ranking sorts the backlog,
                     -- and integers sort far faster than text. Two keys sharing a hash rank
                     -- as one (each gets fewer candidates, never more: the take counts by key)
                     ELSE row_number() OVER (PARTITION BY hashtext(w.limit_name || chr(31) || w.key)
                                             ORDER BY w.eff, w.run_at, w.id) END AS rank
    FROM waiting w
), picked AS (
    SELECT r.id, r.limit_name, r.key, r.rank, r.eff, r.run_at
    FROM ranked r
    LEFT JOIN held h ON h.slot = r.limit_name || chr(31) || r.key
    LEFT JOIN started s ON s.limit_name = r.limit_name AND s.key = r.key
    WHERE r.limit_name IS NULL
       OR (r.rank <= r.max_running - coalesce(h.running, 0)
           AND (r.rate_n IS NULL OR r.rank <= r.rate_n - coalesce(s.starts, 0)))
    ORDER BY r.rank, r.eff, r.run_at, r.id
    LIMIT %(fetch)s
)
-- the highest job id beside them, in the same snapshot (one row with NULLs when no job
-- is a candidate): the next look for arrivals starts above it
SELECT p.id, p.limit_name, p.key, p.rank, w.watermark
FROM (SELECT coalesce(max(id), 0) AS watermark FROM awa.jobs) w
LEFT JOIN picked p ON true
ORDER BY p.rank, p.eff, p.run_at, p.id;

-- name: claim_limited_candidates
-- Step 1: the candidates, best first: (id, limit name, key); limit and key NULL when no
-- limit selects the job (such jobs are not round-robined: their rank counts as 1).
{{limited_ranking_from}}
    FROM awa.jobs j
{{limited_ranking}}

-- name: claim_limited_arrivals
-- Step 1 between full scans: the jobs that arrived since the last look (ids above %(after)s,
-- the watermark the last look returned: a primary-key range, the rows inserted since,
-- not the whole backlog), ranked among themselves within their key as
-- claim_limited_candidates ranks the backlog; the claimer merges them after the keys'
-- cached candidates (awa_cli/limits.py Candidates.merge), so a new key's first job goes to
-- the front at once.
{{limited_ranking_from}}
    FROM (SELECT * FROM awa.jobs WHERE id > %(after)s) j
{{limited_ranking}}

-- name: claim_limited_take
-- Steps 2 and 3 in one statement: awa.limit_usage (migration 0010) takes the advisory
-- transaction lock of each (limit, key) of the candidates, in sorted order, and recounts
-- with a snapshot taken after the locks; then claim what the limits leave and log the
-- starts. The RETURNING list is a claim's (claim_returning: the job rows, then their parents).
-- A pause that committed after step 1 is seen here too (the `locked` probe checks it).
WITH lim AS (
{{claim_limits}}
), cand AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(names)s::text[], %(keys)s::text[])
        WITH ORDINALITY AS c(id, limit_name, key, ord)
), keys AS (
    SELECT DISTINCT limit_name, key FROM cand WHERE limit_name IS NOT NULL
), usage AS MATERIALIZED (
    SELECT * FROM awa.limit_usage(%(lock_class)s::int,
                                  ARRAY(SELECT limit_name FROM keys), ARRAY(SELECT key FROM keys),
                                  %(l_names)s::text[], %(l_kinds)s::text[], %(l_queues)s::text[],
                                  %(l_sources)s::text[], %(l_paths)s::text[],
                                  %(l_rate_w)s::float8[])
), clock AS (
    -- the locks' time (no limited candidate: now)
    SELECT coalesce((SELECT max(u.at) FROM usage u), clock_timestamp()) AS at
), allowed AS (
    -- each key's candidates, in candidate order, as many as its free slots and rate budget
    -- leave (counted before locking: a candidate another claimer holds uses up its key's
    -- share of this claim, so the claim may come back short, never over the limit)
    SELECT p.id, p.limit_name, p.key, p.ord, l.rate_n
    FROM (SELECT c.*, row_number() OVER (PARTITION BY c.limit_name, c.key ORDER BY c.ord) AS rn
          FROM cand c) p
    LEFT JOIN lim l ON l.name = p.limit_name
    LEFT JOIN usage u ON u.limit_name = p.limit_name AND u.key = p.key
    WHERE p.limit_name IS NULL
       OR (p.rn <= l.max_running - coalesce(u.running, 0)
           AND (l.rate_n IS NULL OR p.rn <= l.rate_n - coalesce(u.starts, 0)))
), chosen AS (
    -- one primary-key probe and row lock per allowed candidate, in order, until `limit`
    -- are locked: the rows not needed are never locked
    SELECT a.id, a.limit_name, a.key, a.rate_n
    FROM (SELECT * FROM allowed ORDER BY ord) a CROSS JOIN LATERAL (
        SELECT j.id FROM awa.jobs j
        WHERE j.id = a.id AND j.queue = %(queue)s
          AND j.state IN ('available', 'scheduled', 'retryable') AND j.run_at <= now()
          AND NOT EXISTS (SELECT 1 FROM awa.queues AS q WHERE q.name = %(queue)s AND q.paused)
        FOR UPDATE SKIP LOCKED
    ) l
    LIMIT %(limit)s
), logged AS (
    INSERT INTO awa.limit_starts (limit_name, key, started_at)
    SELECT c.limit_name, c.key, (SELECT at FROM clock) FROM chosen c WHERE c.rate_n IS NOT NULL
), pruned AS (
    -- starts two windows old: one window is all a count needs now, but a short claim's
    -- rate wait (limit_rate_free_in) counts the window as it was when that claim BEGAN, a
    -- little earlier; pruning at one window here deleted the starts it counted, so it saw
    -- the key in budget, found nothing to wait for and slept a whole poll (a window of
    -- `limited_rate` with 20-80 starts instead of 100)
    DELETE FROM awa.limit_starts s USING keys k, lim l
    WHERE s.limit_name = k.limit_name AND s.key = k.key AND l.name = s.limit_name
      AND l.rate_n IS NOT NULL
      AND s.started_at <= (SELECT at FROM clock) - 2 * l.rate_w * interval '1 second'
)
UPDATE awa.jobs AS j SET
    state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    -- the start as the rate window logged it (ordered as the key lock orders the claims)
    attempted_at = (SELECT at FROM clock),
    -- the slot the attempt holds until it leaves running (migration 0016); '': no limit
    limit_slot = coalesce(chosen.limit_name || chr(31) || chosen.key, ''),
{{attempt_worker_deadline}}
FROM chosen
WHERE j.id = chosen.id
{{claim_returning}};

-- name: limit_rate_free_in
-- Two columns: seconds until the first key of these limits that was out of rate budget %(since)s seconds
-- ago (when the runner's short claim began) gets budget again; NULL: none was. A key whose
-- window holds c >= rate_n starts gets budget back when its (c - rate_n + 1)-th oldest start
-- leaves the window. Counted from the claim's time, not now: a start that left the window
-- between the claim and this statement makes the answer 0 (claim again at once), not NULL
-- (a poll's wait). A runner whose claim came back short sleeps that long at most, so the
-- window is honoured to the millisecond, not in poll-sized steps.
WITH lim AS (
    SELECT l.name, l.rate_n, l.rate_w
    FROM unnest(%(l_names)s::text[], %(l_rate_n)s::int[], %(l_rate_w)s::float8[])
        AS l(name, rate_n, rate_w)
    WHERE l.rate_n IS NOT NULL
), clock AS (
    SELECT clock_timestamp() AS now,
           clock_timestamp() - %(since)s::float8 * interval '1 second' AS claimed
), spent AS (
    SELECT s.limit_name, s.key, l.rate_n, l.rate_w, count(*) AS starts
    FROM awa.limit_starts s JOIN lim l ON l.name = s.limit_name
    WHERE s.started_at > (SELECT claimed FROM clock) - l.rate_w * interval '1 second'
    GROUP BY s.limit_name, s.key, l.rate_n, l.rate_w
    HAVING count(*) >= l.rate_n
), frees AS (
    SELECT (SELECT o.started_at FROM awa.limit_starts o
            WHERE o.limit_name = p.limit_name AND o.key = p.key
              AND o.started_at > (SELECT claimed FROM clock) - p.rate_w * interval '1 second'
            ORDER BY o.started_at OFFSET p.starts - p.rate_n LIMIT 1)
           + p.rate_w * interval '1 second' AS free_at
    FROM spent p
)
SELECT extract(epoch FROM min(free_at) - (SELECT now FROM clock)),
       -- and the queue's next_due (claim.sql), in the same round trip
       (SELECT extract(epoch FROM min(run_at) - now()) FROM awa.jobs
        WHERE queue = %(queue)s AND state IN ('scheduled', 'retryable'))
FROM frees;

-- name: limit_publish
-- A worker joining the fleet announces its [limits.NAME] tables, once it found no live worker
-- enforcing others (or was started with --accept-limits-change, worker/fleet.py): for awa
-- job show, the Client and the leader's gauge, never for the claim.
WITH given AS (
    SELECT * FROM unnest(%(names)s::text[], %(kinds)s::text[], %(queues)s::text[],
                         %(keys)s::text[], %(max)s::int[], %(rate_n)s::int[], %(rate_w)s::float8[])
        AS g(name, kind, queue, key, max_running, rate_count, rate_window)
), gone AS (
    DELETE FROM awa.limits WHERE name <> ALL (%(names)s::text[])
)
INSERT INTO awa.limits (name, kind, queue, key, max_running, rate_count, rate_window, updated_at)
SELECT name, kind, queue, key, max_running, rate_count, rate_window, now() FROM given
ON CONFLICT (name) DO UPDATE SET
    kind = excluded.kind, queue = excluded.queue, key = excluded.key,
    max_running = excluded.max_running, rate_count = excluded.rate_count,
    rate_window = excluded.rate_window, updated_at = now();

-- fragment: stored_limits
-- The body of a CTE lim over awa.limits as the claim's limits read: the key split into its
-- source ('args', 'kind', 'queue') and, for an args key, its path (a text[] literal).
    SELECT name, kind, queue, max_running, rate_count, rate_window,
           CASE WHEN key LIKE 'args.%%' THEN 'args' ELSE key END AS source,
           CASE WHEN key LIKE 'args.%%' THEN '{' || replace(substr(key, 6), '.', ',') || '}'
                ELSE '{}' END AS path
    FROM awa.limits

-- name: limit_explain
-- Why one available job is not running: its schedule, its queue's pause, and the limit that
-- selects it (from awa.limits) with its key's running count and rate window. One row, or
-- none for an unknown id.
WITH j AS (
    SELECT * FROM awa.jobs WHERE id = %(id)s
), lim AS (
{{stored_limits}}
), m AS (
    SELECT l.*, coalesce(j.concurrency_key,
                         CASE l.source WHEN 'kind' THEN j.kind WHEN 'queue' THEN j.queue
                              ELSE j.args #>> l.path::text[] END, '') AS key
    FROM j, lim l WHERE l.kind = j.kind OR (l.kind IS NULL AND l.queue = j.queue)
    ORDER BY l.kind IS NULL LIMIT 1
), same_key AS (
    SELECT count(*) AS running
    FROM awa.jobs o, m
    WHERE o.state IN ('running', 'waiting_external')
      AND (o.state = 'running' OR o.callback_in_handler)
      AND (o.kind = m.kind OR (m.kind IS NULL AND o.queue = m.queue
                               AND NOT EXISTS (SELECT 1 FROM lim l2 WHERE l2.kind = o.kind)))
      AND coalesce(o.concurrency_key,
                   CASE m.source WHEN 'kind' THEN o.kind WHEN 'queue' THEN o.queue
                        ELSE o.args #>> m.path::text[] END, '') = m.key
), window_starts AS (
    SELECT s.started_at FROM awa.limit_starts s, m
    WHERE m.rate_count IS NOT NULL AND s.limit_name = m.name AND s.key = m.key
      AND s.started_at > clock_timestamp() - m.rate_window * interval '1 second'
)
SELECT j.state::text AS state, j.run_at, j.concurrency_key, now() AS now,
       coalesce((SELECT q.paused FROM awa.queues q WHERE q.name = j.queue), false) AS paused,
       m.name AS limit_name, m.key, m.max_running, (SELECT running FROM same_key) AS running,
       m.rate_count, (SELECT count(*) FROM window_starts) AS starts,
       (SELECT w.started_at + m.rate_window * interval '1 second' FROM window_starts w
        ORDER BY w.started_at DESC OFFSET m.rate_count - 1 LIMIT 1) AS rate_until
FROM j LEFT JOIN m ON true;

-- name: limit_waiting
-- The maintenance leader's gauge: per limit (awa.limits), the due available jobs whose key
-- is at max_running or out of rate budget. One statement per interval.
WITH lim AS (
{{stored_limits}}
), keyed AS (
    SELECT j.state, j.run_at, j.callback_in_handler, m.name, m.key
    FROM awa.jobs j
    CROSS JOIN LATERAL (
        SELECT l.name,
               coalesce(j.concurrency_key,
                        CASE l.source WHEN 'kind' THEN j.kind WHEN 'queue' THEN j.queue
                             ELSE j.args #>> l.path::text[] END, '') AS key
        FROM lim l WHERE l.kind = j.kind OR (l.kind IS NULL AND l.queue = j.queue)
        ORDER BY l.kind IS NULL LIMIT 1
    ) m
    WHERE j.state IN ('available', 'scheduled', 'retryable', 'running', 'waiting_external')
      AND (j.kind IN (SELECT kind FROM lim) OR j.queue IN (SELECT queue FROM lim))
), per_key AS (
    SELECT name, key,
           count(*) FILTER (WHERE state = 'running' OR (state = 'waiting_external' AND callback_in_handler)) AS running,
           count(*) FILTER (WHERE state IN ('available', 'scheduled', 'retryable') AND run_at <= now()) AS due
    FROM keyed GROUP BY 1, 2
), starts AS (
    SELECT s.limit_name AS name, s.key, count(*) AS n
    FROM awa.limit_starts s JOIN lim l ON l.name = s.limit_name
    WHERE l.rate_count IS NOT NULL
      AND s.started_at > clock_timestamp() - l.rate_window * interval '1 second'
    GROUP BY 1, 2
)
SELECT l.name, coalesce(sum(p.due) FILTER (
           WHERE p.running >= l.max_running OR coalesce(s.n, 0) >= l.rate_count), 0)::bigint
FROM lim l
LEFT JOIN per_key p ON p.name = l.name
LEFT JOIN starts s ON s.name = p.name AND s.key = p.key
GROUP BY l.name ORDER BY l.name;

-- name: limit_starts_prune
-- The leader's sweep: starts older than the longest window a limit may have (a day).
DELETE FROM awa.limit_starts WHERE started_at < now() - interval '1 day';

-- name: limits_announced
-- The announced limits (awa.limits), by name: what a joining worker compares its own with.
SELECT name, kind, queue, key, max_running, rate_count, rate_window
FROM awa.limits ORDER BY name;

-- name: limits_fleet_lock
-- A worker joining the fleet: the limits check, the announcement and its presence row are
-- one transaction under this lock, so two workers starting at once cannot both pass.
SELECT pg_advisory_xact_lock(%(lock_class)s::int, 0);

-- name: limits_live_digests
-- The live workers and the digest of the limits each enforces (NULL: before migration 0009).
SELECT id, host, pid, limits_digest
FROM awa.workers
WHERE heartbeat_at >= now() - %(stale)s * interval '1 second'
ORDER BY started_at, id;
