-- awa 0010: the limited claim in one statement (architecture §13, issue 29).
--
-- awa.limit_usage locks the given (limit, key) pairs and counts, for each, the slots in use
-- and the starts in its rate window, with a snapshot taken AFTER the locks. The limited claim
-- (awa_cli/db/sql/claim_limits.sql, claim_limited_take) calls it from the one statement that
-- claims: it used to be a transaction of its own with the lock and the take as two
-- statements (the take's snapshot had to follow the locks), four round trips per claim.
--
-- Why this is still exact under races: the function is VOLATILE, so in READ COMMITTED each
-- query inside it takes a new snapshot. The advisory transaction locks are taken first, one
-- sorted order for everybody (no deadlock between claimers), and held until the calling
-- transaction commits; the counts are taken after them, so they see every claim of these
-- keys committed by whoever held a lock before us, and nobody can claim them until we commit.
-- The caller's row locks (FOR UPDATE SKIP LOCKED) re-check each candidate's latest version,
-- so a candidate claimed meanwhile is skipped.
--
-- The keys are computed as the claim computes them (the limit_held fragment of
-- claim_limits.sql, which the ranking still uses): the job's concurrency_key, else the
-- limit's key ('kind', 'queue', or the args path). A slot is a running job, or one waiting
-- inside its handler (waiting_external with callback_in_handler).
--
-- The limits come as the claim's parallel arrays (awa_cli/limits.py ClaimPlan.params); the
-- pairs as two arrays. at: clock_timestamp() once the locks are held (the claim logs its
-- starts at it, so the starts of one key are ordered as its lock orders the claims).
--
-- Applying this file twice is harmless: CREATE OR REPLACE.

CREATE OR REPLACE FUNCTION awa.limit_usage(
    lock_class integer, pair_names text[], pair_keys text[],
    l_names text[], l_kinds text[], l_queues text[], l_sources text[], l_paths text[],
    l_rate_w double precision[]
) RETURNS TABLE (limit_name text, key text, running bigint, starts bigint, at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_class, s.h)
    FROM (SELECT DISTINCT hashtext(u.n || chr(31) || u.k) AS h
          FROM unnest(pair_names, pair_keys) AS u(n, k)
          ORDER BY 1) s;
    -- a new snapshot: after the locks
    RETURN QUERY
    WITH lim AS (
        SELECT l.name, l.kind, l.queue, l.source, l.path::text[] AS path, l.rate_w
        FROM unnest(l_names, l_kinds, l_queues, l_sources, l_paths, l_rate_w)
            AS l(name, kind, queue, source, path, rate_w)
    ), pairs AS (
        SELECT DISTINCT u.n, u.k FROM unnest(pair_names, pair_keys) AS u(n, k)
    ), clock AS (
        SELECT clock_timestamp() AS t
    ), held AS (
        SELECT coalesce(lk.name, lq.name) AS n,
               coalesce(j.concurrency_key,
                        CASE coalesce(lk.source, lq.source) WHEN 'kind' THEN j.kind
                             WHEN 'queue' THEN j.queue
                             ELSE j.args #>> coalesce(lk.path, lq.path) END, '') AS k,
               count(*) AS c
        FROM (SELECT a.kind, a.queue, a.args, a.concurrency_key FROM awa.jobs a
              WHERE a.state = 'running'
              UNION ALL
              SELECT b.kind, b.queue, b.args, b.concurrency_key FROM awa.jobs b
              WHERE b.state = 'waiting_external' AND b.callback_in_handler) j
        LEFT JOIN lim lk ON lk.kind = j.kind
        LEFT JOIN lim lq ON lk.name IS NULL AND lq.kind IS NULL AND lq.queue = j.queue
        WHERE coalesce(lk.name, lq.name) IS NOT NULL
        GROUP BY 1, 2
    )
    SELECT p.n, p.k, coalesce(h.c, 0)::bigint,
           CASE WHEN l.rate_w IS NULL THEN 0::bigint ELSE (
               SELECT count(*) FROM awa.limit_starts s
               WHERE s.limit_name = p.n AND s.key = p.k
                 AND s.started_at > clock.t - l.rate_w * interval '1 second') END,
           clock.t
    FROM pairs p
    CROSS JOIN clock
    LEFT JOIN lim l ON l.name = p.n
    LEFT JOIN held h ON h.n = p.n AND h.k = p.k;
END $$;
