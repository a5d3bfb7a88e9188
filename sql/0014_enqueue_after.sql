-- awa 0014: awa.enqueue takes `after` (architecture §16): the ids of the jobs a job waits for,
-- and `on_parent_failure`, as the Python insert's after= and on_parent_failure= options
-- (awa_cli/workflows.py validates them, awa_cli/db/dependencies.py, insert_after, writes the
-- child: this file writes the same rows).
--
-- Versioning (docs/enqueue-from-anywhere.md): the two parameters come last, with defaults,
-- so every call written for 0007 (named or positional) keeps working and means the same.
-- CREATE OR REPLACE cannot add a parameter (it would make a second function, and every call
-- naming only the old parameters would be ambiguous between the two), so the 0007 signature
-- is dropped and the function created again, in this migration's one transaction: no
-- session ever sees awa.enqueue missing. awa.enqueue_many takes the two fields too.
--
-- A job with parents is inserted as the Python insert inserts it: `blocked` with
-- pending_parents = the parents not yet completed (with 'run': not yet terminal), or, with
-- 'cancel', `cancelled` at once when a parent already failed or was cancelled (a dead letter
-- counts as failed), or by its run_at when nothing is pending; metadata "awa.after" = the
-- number of parents; one awa.job_dependencies row per parent; each parent flagged
-- has_dependents, its row locked (in id order) while the child is inserted, which orders the
-- insert with the parent's own transition. A held unique key returns NULL and writes nothing
-- (no edge, no flag), as for any job.
--
-- Applying this file twice is harmless: DROP ... IF EXISTS, CREATE OR REPLACE.

DROP FUNCTION IF EXISTS awa.enqueue(text, jsonb, text, integer, timestamptz, integer, jsonb,
                                    text[], text, jsonb, interval, text, text);

-- `after` checked as parent_ids checks it (awa_cli/workflows.py): every id positive, not
-- NULL; duplicates dropped (the first kept, in order); at most 10,000 distinct parents.
CREATE OR REPLACE FUNCTION awa.after_ids(after bigint[]) RETURNS bigint[]
    LANGUAGE plpgsql AS $$
DECLARE
    bad text;
    ids bigint[];
BEGIN
    IF array_ndims(after) > 1 THEN
        PERFORM awa.invalid('after', 'expected a list of job ids');
    END IF;
    SELECT coalesce(e::text, 'NULL') INTO bad FROM unnest(after) WITH ORDINALITY AS t(e, n)
    WHERE e IS NULL OR e <= 0 ORDER BY n LIMIT 1;
    IF bad IS NOT NULL THEN
        PERFORM awa.invalid('after', format('a parent must be a job id or a JobRow, not %s', bad));
    END IF;
    ids := ARRAY(SELECT e FROM unnest(after) WITH ORDINALITY AS t(e, n) GROUP BY e ORDER BY min(n));
    IF cardinality(ids) > 10000 THEN
        PERFORM awa.invalid('after', format('%s parents: at most 10000 per job', cardinality(ids)));
    END IF;
    RETURN ids;
END $$;

-- Enqueue one job with parents (awa.enqueue's arguments, checked by it; `after` deduplicated
-- and not empty). The parents are locked in id order (as dep_lock_parents does: concurrent
-- inserts never deadlock), so the states read are committed ones and a parent's transition
-- that commits later sees the child's edge.
CREATE OR REPLACE FUNCTION awa.enqueue_child(
    p_kind text, p_args jsonb, p_queue text, p_priority integer, p_run_at timestamptz,
    p_max_attempts integer, p_metadata jsonb, p_tags text[], p_unique_key bytea,
    p_unique_states awa.job_state[], p_deadline_duration double precision, p_ordering_key text,
    p_concurrency_key text, p_after bigint[], p_on_parent_failure text
) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_found jsonb;
    v_found_count integer;
    v_parent bigint;
    v_parent_state text;
    v_bad bigint;
    v_bad_state text;
    v_pending integer := 0;
    v_state awa.job_state;
    v_error jsonb;
    v_id bigint;
BEGIN
    SELECT coalesce(jsonb_object_agg(p.id::text, p.state), '{}'), count(*)
    INTO v_found, v_found_count
    FROM (SELECT j.id, j.state::text AS state FROM awa.jobs AS j
          WHERE j.id = ANY (p_after) ORDER BY j.id FOR NO KEY UPDATE) AS p;
    IF v_found_count < cardinality(p_after) THEN  -- a dead-lettered parent counts as failed
        v_found := v_found || coalesce((
            SELECT jsonb_object_agg(d.id::text, 'failed') FROM awa.dead_letters AS d
            WHERE d.id = ANY (p_after) AND NOT v_found ? d.id::text), '{}');
    END IF;
    FOREACH v_parent IN ARRAY p_after LOOP
        v_parent_state := v_found ->> v_parent::text;
        IF v_parent_state IS NULL THEN
            PERFORM awa.invalid('after', format('parent job %s not found', v_parent));
        END IF;
        IF p_on_parent_failure = 'cancel' THEN
            IF v_bad IS NULL AND v_parent_state IN ('failed', 'cancelled') THEN
                v_bad := v_parent;
                v_bad_state := v_parent_state;
            END IF;
            IF v_parent_state <> 'completed' THEN
                v_pending := v_pending + 1;
            END IF;
        ELSIF v_parent_state NOT IN ('completed', 'failed', 'cancelled') THEN
            v_pending := v_pending + 1;
        END IF;
    END LOOP;
    IF v_bad IS NOT NULL THEN  -- cancelled at insert, as the parent's transition would have
        v_state := 'cancelled';
        v_pending := 0;
        v_error := jsonb_build_object('error', format('parent %s %s', v_bad, v_bad_state),
                                      'attempt', 0, 'terminal', true, 'parent', v_bad);
    ELSIF v_pending > 0 THEN
        v_state := 'blocked';
    ELSIF p_run_at > now() THEN
        v_state := 'scheduled';
    ELSE
        v_state := 'available';
    END IF;
    v_id := nextval('awa.jobs_id_seq');
    -- Two statements, as in awa.enqueue: ON CONFLICT only when there is a unique key.
    IF p_unique_key IS NULL THEN
        INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                              deadline_duration, metadata, tags, ordering_key, concurrency_key,
                              pending_parents, on_parent_failure, errors, finalized_at)
        OVERRIDING SYSTEM VALUE
        VALUES (v_id, p_kind, p_queue, p_args, v_state, p_priority, p_max_attempts,
                coalesce(p_run_at, now()), p_deadline_duration,
                p_metadata || jsonb_build_object('awa.after', cardinality(p_after)), p_tags,
                p_ordering_key, p_concurrency_key, v_pending, p_on_parent_failure,
                CASE WHEN v_error IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(v_error) END,
                CASE WHEN v_state = 'cancelled' THEN now() END);
    ELSE
        INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                              deadline_duration, metadata, tags, unique_key, unique_states,
                              ordering_key, concurrency_key, pending_parents, on_parent_failure,
                              errors, finalized_at)
        OVERRIDING SYSTEM VALUE
        VALUES (v_id, p_kind, p_queue, p_args, v_state, p_priority, p_max_attempts,
                coalesce(p_run_at, now()), p_deadline_duration,
                p_metadata || jsonb_build_object('awa.after', cardinality(p_after)), p_tags,
                p_unique_key, p_unique_states, p_ordering_key, p_concurrency_key, v_pending,
                p_on_parent_failure,
                CASE WHEN v_error IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(v_error) END,
                CASE WHEN v_state = 'cancelled' THEN now() END)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states)
        DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;  -- the unique key is held: no edge, no flag
        END IF;
    END IF;
    INSERT INTO awa.job_dependencies (parent_id, child_id) SELECT p, v_id FROM unnest(p_after) AS p;
    UPDATE awa.jobs AS j SET has_dependents = true
    WHERE j.id = ANY (p_after) AND NOT j.has_dependents;
    RETURN v_id;
END $$;

-- Enqueue one job; returns its id, or NULL when its unique key is held by another job (the
-- insert is skipped, the caller's transaction goes on: a trigger outbox never fails an order
-- because its job already exists). A NULL argument means the default, as None does in Python.
-- The parameters of 0007 (see sql/0007_enqueue_function.sql for each one's rule), then:
--   after              parent job ids (default: none): the job is blocked until they complete;
--                      positive, at most 10,000 distinct (duplicates count once), each an
--                      existing job or dead letter
--   on_parent_failure  'cancel' (the default: a failed or cancelled parent cancels the job)
--                      or 'run' (it runs once every parent is terminal)
CREATE OR REPLACE FUNCTION awa.enqueue(
    kind text DEFAULT NULL,
    args jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 2,
    run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    metadata jsonb DEFAULT '{}',
    tags text[] DEFAULT '{}',
    unique_key text DEFAULT NULL,
    unique_opts jsonb DEFAULT NULL,
    deadline_duration interval DEFAULT NULL,
    ordering_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    after bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel'
) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_queue text := coalesce(queue, 'default');
    v_priority integer := coalesce(priority, 2);
    v_max_attempts integer := coalesce(max_attempts, 25);
    v_metadata jsonb := coalesce(metadata, '{}');
    v_tags text[] := coalesce(tags, '{}');
    v_deadline double precision;
    v_key bytea;
    v_states awa.job_state[];
    v_by_args boolean := true;
    v_by_queue boolean := false;
    v_by_period double precision;
    v_option text;
    v_id bigint;
    v_after bigint[];
    v_policy text := coalesce(on_parent_failure, 'cancel');
BEGIN
    -- As in Python (awa_cli/workflows.py, split_after), the parents and the policy are
    -- checked first, the policy even without parents.
    IF after IS NOT NULL THEN
        v_after := awa.after_ids(after);
    END IF;
    IF v_policy NOT IN ('cancel', 'run') THEN
        PERFORM awa.invalid('on_parent_failure',
                            format('must be ''cancel'' or ''run'', not %L', v_policy));
    END IF;
    -- The common case is one cheap test per field; a failing field calls awa.invalid.
    IF kind IS NULL THEN
        PERFORM awa.invalid('kind', 'is required');
    ELSIF kind = '' OR char_length(kind) > 200 THEN
        PERFORM awa.check_name(kind, 'kind');
    END IF;
    IF v_queue = '' OR char_length(v_queue) > 200 THEN
        PERFORM awa.check_name(v_queue, 'queue');
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'object' THEN
        PERFORM awa.invalid('args', 'expected a JSON object, got '
                                    || coalesce(jsonb_typeof(args), 'NULL'));
    END IF;
    IF v_priority NOT BETWEEN 1 AND 4 THEN
        PERFORM awa.invalid('priority', format('must be between 1 and 4, got %s', v_priority));
    END IF;
    IF v_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM awa.invalid('max_attempts',
                            format('must be between 1 and 1000, got %s', v_max_attempts));
    END IF;
    IF run_at IS NOT NULL AND NOT (run_at >= '0001-01-01 00:00:00+00'
                                   AND run_at < '10000-01-01 00:00:00+00') THEN
        PERFORM awa.invalid('run_at', 'outside the years 1-9999 in UTC');
    END IF;
    IF deadline_duration IS NOT NULL THEN
        v_deadline := extract(epoch FROM deadline_duration);
        IF v_deadline < 0 THEN
            PERFORM awa.invalid('deadline_duration',
                                format('must be a finite, non-negative duration, got %s',
                                       v_deadline));
        END IF;
    END IF;
    IF jsonb_typeof(v_metadata) <> 'object' THEN
        PERFORM awa.invalid('metadata', 'expected a JSON object, got ' || jsonb_typeof(v_metadata));
    END IF;
    IF array_ndims(v_tags) > 1 THEN
        PERFORM awa.invalid('tags', 'expected a list of strings');
    ELSIF cardinality(v_tags) > 20 THEN
        PERFORM awa.invalid('tags', format('more than 20 tags (%s)', cardinality(v_tags)));
    ELSIF array_position(v_tags, NULL) IS NOT NULL THEN
        PERFORM awa.invalid('tags', 'expected strings, got NULL');
    END IF;
    IF ordering_key IS NOT NULL THEN
        PERFORM awa.check_name(ordering_key, 'ordering_key');
    END IF;
    IF concurrency_key IS NOT NULL THEN
        PERFORM awa.check_name(concurrency_key, 'concurrency_key');
    END IF;
    IF unique_key IS NOT NULL AND unique_key = '' THEN
        PERFORM awa.invalid('unique_key', 'must not be empty');
    END IF;
    IF unique_opts IS NOT NULL OR unique_key IS NOT NULL THEN
        IF unique_opts IS NOT NULL AND jsonb_typeof(unique_opts) <> 'object' THEN
            PERFORM awa.invalid('unique_opts', 'expected UniqueOpts or a dict of its fields');
        END IF;
        SELECT o INTO v_option FROM jsonb_object_keys(coalesce(unique_opts, '{}')) AS o
        WHERE o NOT IN ('by_args', 'by_queue', 'by_period', 'states') ORDER BY o LIMIT 1;
        IF v_option IS NOT NULL THEN
            PERFORM awa.invalid('unique_opts', format('unknown option %L', v_option));
        END IF;
        IF unique_key IS NOT NULL AND unique_opts ?| ARRAY['by_args', 'by_queue', 'by_period'] THEN
            PERFORM awa.invalid('unique_opts', 'only states applies with an explicit unique_key');
        END IF;
        IF unique_opts ? 'by_args' THEN  -- a boolean, not null (Python's truthiness is not SQL's)
            IF jsonb_typeof(unique_opts -> 'by_args') <> 'boolean' THEN
                PERFORM awa.invalid('unique_opts.by_args', 'expected true or false');
            END IF;
            v_by_args := (unique_opts ->> 'by_args')::boolean;
        END IF;
        IF unique_opts ? 'by_queue' THEN  -- a boolean, not null (Python's truthiness is not SQL's)
            IF jsonb_typeof(unique_opts -> 'by_queue') <> 'boolean' THEN
                PERFORM awa.invalid('unique_opts.by_queue', 'expected true or false');
            END IF;
            v_by_queue := (unique_opts ->> 'by_queue')::boolean;
        END IF;
        IF unique_opts ? 'by_period' AND unique_opts -> 'by_period' <> 'null' THEN
            IF jsonb_typeof(unique_opts -> 'by_period') <> 'number' THEN
                PERFORM awa.invalid('unique_opts.by_period', 'expected seconds');
            END IF;
            v_by_period := (unique_opts ->> 'by_period')::double precision;
            IF v_by_period < 0 THEN
                PERFORM awa.invalid('unique_opts.by_period', format(
                    'must be a finite, non-negative duration, got %s', unique_opts -> 'by_period'));
            ELSIF v_by_period < 0.001 THEN
                PERFORM awa.invalid('unique_opts.by_period', 'must be at least 0.001 seconds');
            END IF;
        END IF;
        v_states := awa.unique_states_of(unique_opts -> 'states');
        v_key := awa.unique_key_for(kind, args, v_queue, v_by_args, v_by_queue, v_by_period,
                                    now(), unique_key);
    END IF;
    IF cardinality(v_after) > 0 THEN  -- a child (architecture §16): awa.enqueue_child
        RETURN awa.enqueue_child(kind, args, v_queue, v_priority, run_at, v_max_attempts,
                                 v_metadata, v_tags, v_key, v_states, v_deadline, ordering_key,
                                 concurrency_key, v_after, v_policy);
    END IF;
    -- The id is drawn first and no RETURNING is used, and a job without a unique key is a
    -- plain INSERT (ON CONFLICT needs SELECT on the arbiter's columns): a role with INSERT on
    -- awa.jobs and USAGE on its sequence (a producer, the role of a trigger's statement) can
    -- enqueue; unique jobs need SELECT (unique_key, state, unique_states) besides.
    v_id := nextval('awa.jobs_id_seq');
    IF v_key IS NULL THEN
        INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                              deadline_duration, metadata, tags, ordering_key, concurrency_key)
        OVERRIDING SYSTEM VALUE
        VALUES (v_id, enqueue.kind, v_queue, enqueue.args,
                CASE WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
                v_priority, v_max_attempts, coalesce(enqueue.run_at, now()), v_deadline,
                v_metadata, v_tags, enqueue.ordering_key, enqueue.concurrency_key);
        RETURN v_id;
    END IF;
    INSERT INTO awa.jobs (id, kind, queue, args, state, priority, max_attempts, run_at,
                          deadline_duration, metadata, tags, unique_key, unique_states,
                          ordering_key, concurrency_key)
    OVERRIDING SYSTEM VALUE
    VALUES (v_id, enqueue.kind, v_queue, enqueue.args,
            CASE WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
            v_priority, v_max_attempts, coalesce(enqueue.run_at, now()), v_deadline, v_metadata,
            v_tags, v_key, v_states, enqueue.ordering_key, enqueue.concurrency_key)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states)
    DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;  -- the unique key is held
    END IF;
    RETURN v_id;
END $$;

-- An enqueue_many object's `after`: a JSON array of job ids (null or missing: none). An
-- element that is not a whole number is refused as the Python insert refuses it; JSON null
-- becomes NULL, which awa.after_ids refuses.
CREATE OR REPLACE FUNCTION awa.job_after(value jsonb) RETURNS bigint[]
    LANGUAGE plpgsql AS $$
DECLARE
    bad jsonb;
BEGIN
    IF value IS NULL OR value = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(value) <> 'array' THEN
        PERFORM awa.invalid('after', format('expected a list of job ids, got %s',
                                            jsonb_typeof(value)));
    END IF;
    SELECT e INTO bad FROM jsonb_array_elements(value) AS e
    WHERE CASE jsonb_typeof(e)
              WHEN 'null' THEN false
              WHEN 'number' THEN NOT (e::text ~ '^[1-9][0-9]{0,18}$'
                                      AND (length(e::text) < 19 OR e::text <= '9223372036854775807'))
              ELSE true END
    LIMIT 1;
    IF bad IS NOT NULL THEN
        PERFORM awa.invalid('after', format('a parent must be a job id or a JobRow, not %s', bad));
    END IF;
    RETURN ARRAY(SELECT (e #>> '{}')::bigint FROM jsonb_array_elements(value) AS e);
END $$;

-- Enqueue many jobs in one call: a JSON array of objects whose fields are awa.enqueue's
-- parameter names (a missing or null field takes the default; an unknown one is an error;
-- run_at is an ISO 8601 string, deadline_duration seconds or an interval string). Returns one
-- id per object, in order (NULL where a unique key was held). All or nothing: an invalid
-- object (its index is in the message, "(jobs[3])") writes no job. Since 0014: `after`, a JSON
-- array of job ids, and `on_parent_failure`, a string.
CREATE OR REPLACE FUNCTION awa.enqueue_many(jobs jsonb) RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    job jsonb;
    n bigint;
    unknown text;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        PERFORM awa.invalid('jobs', 'expected a JSON array of job objects');
    END IF;
    FOR job, n IN SELECT e, o - 1 FROM jsonb_array_elements(jobs) WITH ORDINALITY AS t(e, o) LOOP
        PERFORM set_config('awa.enqueue_element', n::text, true);
        IF jsonb_typeof(job) <> 'object' THEN
            PERFORM awa.invalid('jobs', format('expected a JSON object, got %s', jsonb_typeof(job)));
        END IF;
        SELECT k INTO unknown FROM jsonb_object_keys(job) AS k
        WHERE k NOT IN ('kind', 'args', 'queue', 'priority', 'run_at', 'max_attempts', 'metadata',
                        'tags', 'unique_key', 'unique_opts', 'deadline_duration', 'ordering_key',
                        'concurrency_key', 'after', 'on_parent_failure')
        ORDER BY k LIMIT 1;
        IF unknown IS NOT NULL THEN
            PERFORM awa.invalid(unknown, 'unknown field');
        END IF;
        RETURN NEXT awa.enqueue(
            kind => awa.job_field(job, 'kind', 'string') #>> '{}',
            args => coalesce(job -> 'args', '{}'),
            queue => awa.job_field(job, 'queue', 'string') #>> '{}',
            priority => (awa.job_field(job, 'priority', 'integer') #>> '{}')::integer,
            run_at => (awa.job_field(job, 'run_at', 'string') #>> '{}')::timestamptz,
            max_attempts => (awa.job_field(job, 'max_attempts', 'integer') #>> '{}')::integer,
            metadata => awa.job_field(job, 'metadata', 'object'),
            tags => ARRAY(SELECT jsonb_array_elements_text(awa.job_field(job, 'tags', 'array'))),
            unique_key => awa.job_field(job, 'unique_key', 'string') #>> '{}',
            unique_opts => nullif(job -> 'unique_opts', 'null'),  -- checked by awa.enqueue
            deadline_duration => (awa.job_field(job, 'deadline_duration', 'interval') #>> '{}')::interval,
            ordering_key => awa.job_field(job, 'ordering_key', 'string') #>> '{}',
            concurrency_key => awa.job_field(job, 'concurrency_key', 'string') #>> '{}',
            after => awa.job_after(job -> 'after'),
            on_parent_failure => awa.job_field(job, 'on_parent_failure', 'string') #>> '{}');
    END LOOP;
    PERFORM set_config('awa.enqueue_element', '', true);
END $$;
