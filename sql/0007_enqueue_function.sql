-- awa 0007: enqueue from any language (architecture §17): awa.enqueue(...) and
-- awa.enqueue_many(jsonb), the versioned wire contract for producers that are not Python
-- (psql, Node, Go, a trigger).
--
-- The rules are the Python insert's (awa_cli/enqueue.py, prepare): the same defaults, the same
-- limits, one ERROR with SQLSTATE 22023 (invalid_parameter_value) whose message starts with
-- the field's name ("priority: must be between 1 and 4, got 7") and whose COLUMN field is that
-- name; nothing is written. tests/vectors/enqueue.json holds the cases both must agree on.
-- The insert fires jobs_notify_inserted (0001) like every other insert: the NOTIFY that wakes
-- an idle worker is the same one.
--
-- Versioning: a new parameter is added with a default (positional and named calls written
-- for an older version keep working); nothing is removed or changes meaning without a new
-- function name. The next planned parameter is `after bigint[] DEFAULT NULL` (parent job
-- ids, architecture §16), added after concurrency_key by the workflows migration.
--
-- Every function here is CREATE OR REPLACE, so applying this file twice is harmless.

-- A JSON string the way Python's json.dumps writes it with ensure_ascii: PostgreSQL escapes
-- the quote, the backslash and the control characters exactly as Python does; every other
-- character outside printable ASCII becomes \uXXXX (a surrogate pair above U+FFFF).
CREATE OR REPLACE FUNCTION awa.canonical_json_string(value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    escaped text := to_json(value)::text;
BEGIN
    IF escaped !~ '[^\x20-\x7e]' THEN
        RETURN escaped;
    END IF;
    RETURN (
        SELECT string_agg(
                   CASE
                       WHEN ascii(c) BETWEEN 32 AND 126 THEN c
                       WHEN ascii(c) <= 65535 THEN '\u' || lpad(to_hex(ascii(c)), 4, '0')
                       ELSE '\u' || to_hex(55296 + ((ascii(c) - 65536) >> 10))
                            || '\u' || to_hex(56320 + ((ascii(c) - 65536) & 1023))
                   END, '' ORDER BY n)
        FROM regexp_split_to_table(escaped, '') WITH ORDINALITY AS t(c, n)
    );
END $$;

-- A JSON number the way Python writes what json.loads made of it: an integer as its digits, a
-- number with a fraction as repr(float) (shortest round-trip digits; exponent form below
-- 1e-4 and from 1e16 on). jsonb has no exponent form, so 1e2 reaches here as 100 (an integer).
CREATE OR REPLACE FUNCTION awa.canonical_json_number(value numeric) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    written text := value::text;
    shortest text;
    negative boolean;
    mantissa text;
    exponent int := 0;
    digits text;
    point int;
    lead int;
BEGIN
    IF position('.' IN written) = 0 THEN
        RETURN written;
    END IF;
    -- float8 output is the shortest round-trip form when extra_float_digits > 0 (the caller,
    -- awa.unique_key_for, sets it), as Python's repr is.
    shortest := value::float8::text;
    negative := left(shortest, 1) = '-';
    shortest := ltrim(shortest, '-');
    IF position('e' IN shortest) > 0 THEN
        exponent := split_part(shortest, 'e', 2)::int;
        shortest := split_part(shortest, 'e', 1);
    END IF;
    mantissa := split_part(shortest, '.', 1);
    digits := mantissa || split_part(shortest, '.', 2);
    point := length(mantissa) + exponent;
    lead := length(digits) - length(ltrim(digits, '0'));
    digits := rtrim(ltrim(digits, '0'), '0');
    point := point - lead;
    IF digits = '' THEN
        RETURN CASE WHEN negative THEN '-0.0' ELSE '0.0' END;
    END IF;
    IF point <= -4 OR point > 16 THEN
        written := left(digits, 1)
            || CASE WHEN length(digits) > 1 THEN '.' || substr(digits, 2) ELSE '' END
            || 'e' || CASE WHEN point - 1 < 0 THEN '-' ELSE '+' END
            || CASE WHEN abs(point - 1) < 10 THEN '0' ELSE '' END || abs(point - 1)::text;
    ELSIF point <= 0 THEN
        written := '0.' || repeat('0', -point) || digits;
    ELSIF point >= length(digits) THEN
        written := digits || repeat('0', point - length(digits)) || '.0';
    ELSE
        written := left(digits, point) || '.' || substr(digits, point + 1);
    END IF;
    RETURN CASE WHEN negative THEN '-' || written ELSE written END;
END $$;

-- A JSON value as Python's json.dumps(value, sort_keys=True, separators=(",", ":")) writes it:
-- keys in code point order (the "C" collation orders UTF-8 by code point), no spaces.
CREATE OR REPLACE FUNCTION awa.canonical_json(value jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(awa.canonical_json_string(e.key) || ':' || awa.canonical_json(e.value),
                                  ',' ORDER BY e.key COLLATE "C")
                FROM jsonb_each(value) AS e), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(awa.canonical_json(e.value), ',' ORDER BY e.n)
                FROM jsonb_array_elements(value) WITH ORDINALITY AS e(value, n)), '') || ']';
        WHEN 'string' THEN
            RETURN awa.canonical_json_string(value #>> '{}');
        WHEN 'number' THEN
            RETURN awa.canonical_json_number((value #>> '{}')::numeric);
        ELSE
            RETURN value::text;  -- true, false, null
    END CASE;
END $$;

-- The deduplication key, byte for byte the one awa_cli.enqueue.unique_key computes:
-- sha256 of {"args":…,"bucket":…,"kind":…,"queue":…} in canonical JSON, where args is null
-- unless by_args, queue null unless by_queue, bucket floor(epoch seconds at insert / by_period)
-- or null. An explicit key (awa.enqueue's unique_key) is sha256 of {"key":…,"kind":…}: its
-- own shape, so it never equals a computed key.
CREATE OR REPLACE FUNCTION awa.unique_key_for(
    kind text, args jsonb, queue text, by_args boolean, by_queue boolean,
    by_period double precision, at timestamptz, explicit_key text DEFAULT NULL
) RETURNS bytea
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET extra_float_digits = 1 AS $$
BEGIN
    IF explicit_key IS NOT NULL THEN
        RETURN sha256(convert_to('{"key":' || awa.canonical_json_string(explicit_key)
                                 || ',"kind":' || awa.canonical_json_string(kind) || '}', 'UTF8'));
    END IF;
    RETURN sha256(convert_to(
        '{"args":' || CASE WHEN by_args THEN awa.canonical_json(args) ELSE 'null' END
        || ',"bucket":' || CASE WHEN by_period IS NULL THEN 'null'
                                ELSE floor(extract(epoch FROM at) / by_period::numeric)::text END
        || ',"kind":' || awa.canonical_json_string(kind)
        || ',"queue":' || CASE WHEN by_queue THEN awa.canonical_json_string(queue) ELSE 'null' END
        || '}', 'UTF8'));
END $$;

-- One validation failure: SQLSTATE 22023, the message "<field>: <problem>", COLUMN = field.
-- Inside awa.enqueue_many the message ends with the element's index ("(jobs[3])"), which
-- enqueue_many keeps in the transaction-local setting awa.enqueue_element.
CREATE OR REPLACE FUNCTION awa.invalid(field text, problem text) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    element text := current_setting('awa.enqueue_element', true);
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = field || ': ' || problem
                  || CASE WHEN element <> '' THEN format(' (jobs[%s])', element) ELSE '' END,
        COLUMN = field;
END $$;

-- A name as inserts accept it (kind, queue, ordering_key, concurrency_key): 1-200 characters.
-- (A NUL character cannot reach a function: PostgreSQL text never holds one.)
CREATE OR REPLACE FUNCTION awa.check_name(value text, field text) RETURNS text
    LANGUAGE plpgsql AS $$
BEGIN
    IF value = '' THEN
        PERFORM awa.invalid(field, 'must not be empty');
    ELSIF char_length(value) > 200 THEN
        PERFORM awa.invalid(field, 'longer than 200 characters');
    END IF;
    RETURN value;
END $$;

-- Enqueue one job; returns its id, or NULL when its unique key is held by another job (the
-- insert is skipped, the caller's transaction goes on: a trigger outbox never fails an order
-- because its job already exists). A NULL argument means "the default", as None does in Python.
--   kind            1-200 characters (required: NULL or missing is an error)
--   args            a JSON object (default {})
--   queue           1-200 characters (default 'default')
--   priority        1-4 (default 2)
--   run_at          years 1-9999 (default now(); later than now() makes the job scheduled)
--   max_attempts    1-1000 (default 25)
--   metadata        a JSON object (default {})
--   tags            at most 20, none NULL (default {})
--   unique_key      an explicit deduplication key (within the kind), held in unique_opts'
--                   states (default: not unique)
--   unique_opts     Python's UniqueOpts as JSON: {"by_args": true, "by_queue": false,
--                   "by_period": seconds, "states": [...]}; '{}' = the defaults
--   deadline_duration  an interval; 0 = no deadline (default: the queue's)
--   ordering_key, concurrency_key  1-200 characters (default NULL)
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
    concurrency_key text DEFAULT NULL
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
BEGIN
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
    -- Extension point: `after` (parent ids, architecture §16) is checked here, and the job
    -- is inserted blocked while a parent is unfinished, once the workflows migration adds it.
    --
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

-- unique_opts' states: a non-empty array of job state names, stored sorted by name (as the
-- Python insert stores them); absent = the default set, JSON null an error (as None in Python).
CREATE OR REPLACE FUNCTION awa.unique_states_of(states jsonb) RETURNS awa.job_state[]
    LANGUAGE plpgsql STABLE AS $$
DECLARE
    bad text;
BEGIN
    IF states IS NULL THEN  -- absent: the default set (DEFAULT_UNIQUE_STATES)
        RETURN '{available,completed,retryable,running,scheduled}';
    END IF;
    IF jsonb_typeof(states) <> 'array' THEN
        PERFORM awa.invalid('unique_opts.states', 'expected a set of job states');
    END IF;
    IF jsonb_array_length(states) = 0 THEN
        PERFORM awa.invalid('unique_opts.states', 'must name at least one state');
    END IF;
    SELECT coalesce(e #>> '{}', e::text) INTO bad FROM jsonb_array_elements(states) AS e
    WHERE jsonb_typeof(e) <> 'string'
       OR NOT (e #>> '{}') = ANY (enum_range(NULL::awa.job_state)::text[])
    LIMIT 1;
    IF bad IS NOT NULL THEN
        PERFORM awa.invalid('unique_opts.states', format('%L is not a valid JobState', bad));
    END IF;
    RETURN ARRAY(SELECT DISTINCT s COLLATE "C" FROM jsonb_array_elements_text(states) AS s
                 ORDER BY 1)::awa.job_state[];
END $$;

-- One field of an enqueue_many object, checked for its JSON type (a missing field and a JSON
-- null are NULL: the default).
CREATE OR REPLACE FUNCTION awa.job_field(job jsonb, field text, expected text) RETURNS jsonb
    LANGUAGE plpgsql AS $$
DECLARE
    value jsonb := job -> field;
BEGIN
    IF value IS NULL OR value = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(value) <> expected
       AND NOT (expected = 'interval' AND jsonb_typeof(value) IN ('number', 'string'))
       AND NOT (expected = 'integer' AND jsonb_typeof(value) = 'number') THEN
        PERFORM awa.invalid(field, format('expected %s, got %s', CASE expected
            WHEN 'string' THEN 'a string' WHEN 'object' THEN 'a JSON object'
            WHEN 'array' THEN 'a list of strings' WHEN 'interval' THEN 'seconds or an interval'
            ELSE expected END, jsonb_typeof(value)));
    END IF;
    IF expected = 'integer' AND NOT (value::numeric = trunc(value::numeric)
                                     AND value::numeric BETWEEN -2147483648 AND 2147483647) THEN
        PERFORM awa.invalid(field, format('expected an integer, got %s', value));
    END IF;
    IF expected = 'array' AND EXISTS (SELECT FROM jsonb_array_elements(value) AS e
                                      WHERE jsonb_typeof(e) <> 'string') THEN
        PERFORM awa.invalid(field, 'expected strings');
    END IF;
    RETURN value;
END $$;

-- Enqueue many jobs in one call: a JSON array of objects whose fields are awa.enqueue's
-- parameter names (a missing or null field takes the default; an unknown one is an error;
-- run_at is an ISO 8601 string, deadline_duration seconds or an interval string). Returns one
-- id per object, in order (NULL where a unique key was held). All or nothing: an invalid
-- object (its index is in the message, "(jobs[3])") writes no job.
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
                        'concurrency_key')
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
            concurrency_key => awa.job_field(job, 'concurrency_key', 'string') #>> '{}');
    END LOOP;
    PERFORM set_config('awa.enqueue_element', '', true);
END $$;
