-- awa 0012: batches (architecture §16): a group of jobs with callback jobs enqueued exactly
-- once, in the transaction that makes their condition true, once the batch is sealed.
--
-- Membership is a column, awa.jobs.batch_id (mirrored read-only in metadata awa.batch_id so
-- the job row and the handler see it): the counting triggers below filter on it without
-- parsing metadata, and the partial index holds members only, so jobs outside batches pay
-- nothing but a NULL.
--
-- Counting: a member's move into or out of a terminal state (completed, failed, cancelled;
-- a removal from awa.jobs while not terminal is a move to the dead-letter queue and counts as
-- failed) is counted by statement-level triggers, in the very statement that makes the move:
-- whatever made it (a worker's batched finalise, a callback resolution, a rescue, an operator
-- cancel or retry, a bulk action, a move to the DLQ), in its transaction, and never for a
-- stale attempt (its guarded UPDATE changes no row, so there is nothing to count).
--
-- The counters are sharded so that no single row becomes a lock every member waits on: a
-- member counts in awa.batch_shards row (batch_id, awa.batch_shard(id, shards)); only a statement that takes a
-- shard's pending count to 0 (or back from 0) touches the batch row, so the batch row sees at
-- most a few updates per shard. Because the shard row is locked by the statement that counts
-- in it, "this shard has nothing pending" is exact, and because every shard closer then
-- updates the batch row, exactly one transaction sees open_shards reach 0 — the one that
-- enqueues the callbacks. Within a statement shards and batches are taken in (batch, shard)
-- order, so two finalising statements never deadlock on them.

ALTER TABLE awa.jobs ADD COLUMN batch_id bigint;
ALTER TABLE awa.dead_letters ADD COLUMN batch_id bigint;
CREATE INDEX jobs_batch_idx ON awa.jobs (batch_id) WHERE batch_id IS NOT NULL;

CREATE TABLE awa.batches (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shards             smallint NOT NULL DEFAULT 16 CHECK (shards BETWEEN 1 AND 256),
    -- shards with a member not yet terminal; 0 once sealed = every member is terminal
    open_shards        integer NOT NULL DEFAULT 0 CHECK (open_shards >= 0),
    -- the callback jobs as validated insert specs (awa_cli/batches.py: spec_of), or NULL
    on_success         jsonb,
    on_complete        jsonb,
    on_death           jsonb,
    metadata           jsonb NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL DEFAULT now(),
    sealed_at          timestamptz,
    first_failed_at    timestamptz,
    -- when each condition was reached after the seal (its callback, if any, enqueued then)
    succeeded_at       timestamptz,
    completed_at       timestamptz,
    died_at            timestamptz,
    on_success_job_id  bigint,
    on_complete_job_id bigint,
    on_death_job_id    bigint
);
CREATE INDEX batches_created_idx ON awa.batches (created_at DESC, id DESC);

CREATE TABLE awa.batch_shards (
    batch_id  bigint NOT NULL REFERENCES awa.batches (id) ON DELETE CASCADE,
    shard     smallint NOT NULL,
    pending   bigint NOT NULL DEFAULT 0,
    completed bigint NOT NULL DEFAULT 0,
    failed    bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard)
) WITH (fillfactor = 50);  -- room on the page: the counter updates stay HOT

-- A member's counter row: runs of 16 consecutive ids share one. Workers claim members in id
-- order, a claim's jobs are finalised together, and so a finalising statement touches one or
-- two counter rows, while the claims other workers have in flight (later ids) count in other
-- rows: few updates per statement and little waiting between workers.
CREATE FUNCTION awa.batch_shard(member bigint, shards smallint) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ((member / 16) % shards)::smallint $$;

-- Enqueue one callback job from its stored spec (NULL spec: nothing, NULL id). The job is an
-- ordinary job whose metadata names its batch, which callback it is, and the batch's counts
-- when the condition came true (the handler's job.batch). A held unique key skips it. It
-- notifies its queue itself: this runs inside a worker's finalising transaction, whose
-- session defers the insert trigger's NOTIFY (awa.defer_notify), and a callback must not
-- wait for the workers' backstop poll.
CREATE FUNCTION awa.batch_enqueue(spec jsonb, batch bigint, which text, counts jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
    at timestamptz := coalesce((spec ->> 'run_at')::timestamptz, now());
BEGIN
    IF spec IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO awa.jobs AS j (kind, queue, args, state, priority, max_attempts, run_at,
                               deadline_duration, metadata, tags, unique_key, unique_states,
                               ordering_key, concurrency_key)
    VALUES (spec ->> 'kind', spec ->> 'queue', spec -> 'args',
            CASE WHEN at > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
            (spec ->> 'priority')::smallint, (spec ->> 'max_attempts')::integer, at,
            (spec ->> 'deadline_duration')::double precision,
            coalesce(spec -> 'metadata', '{}') || jsonb_build_object(
                'awa.batch_id', batch, 'awa.batch_callback', which, 'awa.batch_counts', counts),
            ARRAY(SELECT jsonb_array_elements_text(coalesce(spec -> 'tags', '[]'))),
            decode(spec ->> 'unique_key', 'hex'),
            CASE WHEN spec -> 'unique_states' IS NOT NULL AND spec -> 'unique_states' <> 'null'
                 THEN ARRAY(SELECT jsonb_array_elements_text(spec -> 'unique_states'))::awa.job_state[]
            END,
            spec ->> 'ordering_key', spec ->> 'concurrency_key')
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
    RETURNING j.id INTO new_id;
    IF new_id IS NOT NULL AND at <= now() THEN
        PERFORM pg_notify(awa.channel_for(spec ->> 'queue'), '');
    END IF;
    RETURN new_id;
END $$;

-- The batch's counts as JSON (pending, completed, failed, cancelled, total).
CREATE FUNCTION awa.batch_counts(batch bigint) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'pending', coalesce(sum(pending), 0), 'completed', coalesce(sum(completed), 0),
        'failed', coalesce(sum(failed), 0), 'cancelled', coalesce(sum(cancelled), 0),
        'total', coalesce(sum(pending + completed + failed + cancelled), 0))
    FROM awa.batch_shards WHERE batch_id = batch
$$;

-- Enqueue whatever callbacks have become due for a batch whose row the caller has just
-- locked (by updating it): on_death once a member failed, on_complete once nothing is
-- pending, on_success once nothing is pending and every member completed. Each at most once
-- (its *_at column), and only once the batch is sealed.
CREATE FUNCTION awa.batch_fire(batch bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    b awa.batches;
    counts jsonb;
BEGIN
    SELECT * INTO b FROM awa.batches WHERE id = batch;
    IF NOT FOUND OR b.sealed_at IS NULL THEN
        RETURN;
    END IF;
    IF NOT ((b.first_failed_at IS NOT NULL AND b.died_at IS NULL)
            OR (b.open_shards = 0 AND (b.completed_at IS NULL OR b.succeeded_at IS NULL))) THEN
        RETURN;
    END IF;
    counts := awa.batch_counts(batch);
    IF b.first_failed_at IS NOT NULL AND b.died_at IS NULL THEN
        UPDATE awa.batches SET died_at = now(),
               on_death_job_id = awa.batch_enqueue(b.on_death, batch, 'on_death', counts)
        WHERE id = batch;
    END IF;
    IF b.open_shards = 0 AND b.completed_at IS NULL THEN
        UPDATE awa.batches SET completed_at = now(),
               on_complete_job_id = awa.batch_enqueue(b.on_complete, batch, 'on_complete', counts)
        WHERE id = batch;
    END IF;
    IF b.open_shards = 0 AND b.succeeded_at IS NULL
       AND (counts ->> 'failed')::bigint = 0 AND (counts ->> 'cancelled')::bigint = 0 THEN
        UPDATE awa.batches SET succeeded_at = now(),
               on_success_job_id = awa.batch_enqueue(b.on_success, batch, 'on_success', counts)
        WHERE id = batch;
    END IF;
END $$;

-- Count members' moves: one row per (member, was, now) in `moves`, applied shard by shard in
-- (batch, shard) order; the batch row is touched only by a shard that opens or closes, or by
-- the first failure.
CREATE FUNCTION awa.batch_count(batch_ids bigint[], member_ids bigint[], was text[], now_ text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
    left_pending bigint;
    cur_batch bigint := NULL;
    opened integer := 0;
    died boolean := false;
    recheck boolean := false;
BEGIN
    FOR r IN
        SELECT m.batch_id, awa.batch_shard(m.id, b.shards) AS shard,
               sum(CASE WHEN m.now_ IN ('completed', 'failed', 'cancelled') THEN 0 ELSE 1 END
                   - CASE WHEN m.was IN ('completed', 'failed', 'cancelled') THEN 0 ELSE 1 END) AS dp,
               sum((m.now_ = 'completed')::int - (m.was = 'completed')::int) AS dc,
               sum((m.now_ = 'failed')::int - (m.was = 'failed')::int) AS df,
               sum((m.now_ = 'cancelled')::int - (m.was = 'cancelled')::int) AS dx,
               bool_or(m.now_ = 'failed' AND m.was IS DISTINCT FROM 'failed') AS failing,
               bool_or(m.now_ = 'completed' AND m.was IN ('failed', 'cancelled')) AS redeemed
        FROM unnest(batch_ids, member_ids, was, now_) AS m(batch_id, id, was, now_)
        JOIN awa.batches AS b ON b.id = m.batch_id
        GROUP BY 1, 2
        ORDER BY 1, 2
    LOOP
        IF cur_batch IS DISTINCT FROM r.batch_id THEN
            IF cur_batch IS NOT NULL THEN
                PERFORM awa.batch_settle(cur_batch, opened, died, recheck);
            END IF;
            cur_batch := r.batch_id;
            opened := 0;
            died := false;
            recheck := false;
        END IF;
        died := died OR r.failing;
        recheck := recheck OR r.redeemed;
        IF r.dp = 0 AND r.dc = 0 AND r.df = 0 AND r.dx = 0 THEN
            CONTINUE;
        END IF;
        UPDATE awa.batch_shards
        SET pending = pending + r.dp, completed = completed + r.dc,
            failed = failed + r.df, cancelled = cancelled + r.dx
        WHERE batch_id = r.batch_id AND shard = r.shard
        RETURNING pending INTO left_pending;
        IF NOT FOUND THEN
            CONTINUE;  -- a member inserted outside awa's batch paths: not counted
        END IF;
        IF left_pending = 0 AND r.dp < 0 THEN
            opened := opened - 1;
        ELSIF left_pending > 0 AND left_pending = r.dp THEN
            opened := opened + 1;
        END IF;
    END LOOP;
    IF cur_batch IS NOT NULL THEN
        PERFORM awa.batch_settle(cur_batch, opened, died, recheck);
    END IF;
END $$;

-- The batch-row part of counting a batch's moves: ``opened`` counter rows that opened (minus
-- those that closed), ``died`` when a member failed, ``recheck`` when a failed or cancelled
-- member turned completed without passing through pending (nothing opened or closed, but
-- on_success may now be due). Nothing to do: the batch row is not touched at all.
CREATE FUNCTION awa.batch_settle(batch bigint, opened integer, died boolean, recheck boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF opened = 0 AND NOT died AND NOT recheck THEN
        RETURN;
    END IF;
    -- The first failure's WHERE is false for every later one, which then takes no lock.
    UPDATE awa.batches
    SET open_shards = open_shards + opened,
        first_failed_at = CASE WHEN died THEN coalesce(first_failed_at, now())
                               ELSE first_failed_at END
    WHERE id = batch AND (opened <> 0 OR recheck OR first_failed_at IS NULL);
    IF FOUND THEN
        PERFORM awa.batch_fire(batch);
    END IF;
END $$;

CREATE FUNCTION awa.batch_members_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    members bigint[];
    was text[];
    now_ text[];
BEGIN
    SELECT array_agg(n.batch_id), array_agg(n.id), array_agg(o.state::text), array_agg(n.state::text)
    INTO ids, members, was, now_
    FROM awa_new AS n JOIN awa_old AS o ON o.id = n.id
    WHERE n.batch_id IS NOT NULL AND o.state IS DISTINCT FROM n.state
      AND (o.state IN ('completed', 'failed', 'cancelled')
           OR n.state IN ('completed', 'failed', 'cancelled'));
    IF ids IS NOT NULL THEN
        PERFORM awa.batch_count(ids, members, was, now_);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION awa.batch_members_removed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    members bigint[];
    was text[];
    now_ text[];
BEGIN
    -- A member removed while not terminal was failed and dead-lettered in one statement.
    SELECT array_agg(o.batch_id), array_agg(o.id), array_agg(o.state::text),
           array_agg('failed'::text)
    INTO ids, members, was, now_
    FROM awa_old AS o
    WHERE o.batch_id IS NOT NULL AND o.state NOT IN ('completed', 'failed', 'cancelled');
    IF ids IS NOT NULL THEN
        PERFORM awa.batch_count(ids, members, was, now_);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_batch_members_updated
    AFTER UPDATE ON awa.jobs
    REFERENCING OLD TABLE AS awa_old NEW TABLE AS awa_new
    FOR EACH STATEMENT EXECUTE FUNCTION awa.batch_members_updated();

CREATE TRIGGER jobs_batch_members_removed
    AFTER DELETE ON awa.jobs
    REFERENCING OLD TABLE AS awa_old
    FOR EACH STATEMENT EXECUTE FUNCTION awa.batch_members_removed();

-- Count new members (their ids; NULL entries are skipped) into an open batch: the counter
-- rows first, in shard order, then the batch row, the order every counting statement takes
-- them in, so adding members never deadlocks with members finishing. A sealed batch refuses
-- with SQLSTATE AWB01, a missing one with AWB02: the statement that inserted the members fails
-- with it, and they are gone. The batch row's update is what a concurrent seal waits for.
CREATE FUNCTION awa.batch_add(batch bigint, members bigint[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n_shards smallint;
    r record;
    now_pending bigint;
    opened integer := 0;
BEGIN
    SELECT shards INTO n_shards FROM awa.batches WHERE id = batch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % not found', batch USING ERRCODE = 'AWB02';
    END IF;
    FOR r IN
        SELECT awa.batch_shard(m, n_shards) AS shard, count(*) AS n
        FROM unnest(members) AS m WHERE m IS NOT NULL
        GROUP BY 1 ORDER BY 1
    LOOP
        INSERT INTO awa.batch_shards AS s (batch_id, shard, pending)
        VALUES (batch, r.shard, r.n)
        ON CONFLICT (batch_id, shard) DO UPDATE SET pending = s.pending + excluded.pending
        RETURNING s.pending INTO now_pending;
        IF now_pending = r.n THEN
            opened := opened + 1;
        END IF;
    END LOOP;
    UPDATE awa.batches SET open_shards = open_shards + opened
    WHERE id = batch AND sealed_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'batch % is sealed: no member can be added', batch USING ERRCODE = 'AWB01';
    END IF;
    RETURN opened;
END $$;

-- Seal a batch: no member can be added any more, and the callbacks whose condition already
-- holds are enqueued now, in this transaction. False when it was already sealed, NULL when
-- there is no such batch.
CREATE FUNCTION awa.batch_seal(batch bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awa.batches SET sealed_at = now() WHERE id = batch AND sealed_at IS NULL;
    IF NOT FOUND THEN
        RETURN CASE WHEN EXISTS (SELECT 1 FROM awa.batches WHERE id = batch) THEN false END;
    END IF;
    PERFORM awa.batch_fire(batch);
    RETURN true;
END $$;
