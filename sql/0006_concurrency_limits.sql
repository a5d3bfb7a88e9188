-- awa 0006: concurrency keys and rate limits (architecture §13).
--
-- A job's explicit concurrency key (the insert option); NULL: the key its limit computes at
-- claim time from the job ([limits.NAME] key). Added to awa.dead_letters too, so the move
-- statements that copy columns by name keep working.
ALTER TABLE awa.jobs ADD COLUMN concurrency_key text
    CHECK (char_length(concurrency_key) BETWEEN 1 AND 200);
ALTER TABLE awa.dead_letters ADD COLUMN concurrency_key text;

-- The starts of rate-limited keys: one row per claimed attempt of a key whose limit has a
-- rate, written by the claim while it holds the key's advisory lock, so the sliding window
-- ("no span of the window's length holds more than N starts") is counted exactly. Rows older
-- than their window are pruned by the next claim of the same key and by the maintenance
-- leader; the table holds at most N rows per key and window.
CREATE TABLE awa.limit_starts (
    limit_name text NOT NULL,
    key        text NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX limit_starts_key_idx ON awa.limit_starts (limit_name, key, started_at);
CREATE INDEX limit_starts_at_idx ON awa.limit_starts (started_at);

-- The limits as the workers' config declares them ([limits.NAME]), announced by each worker
-- at start (the last one wins), so a process without the config (awa job show, a Client,
-- the maintenance leader's gauge) can say why an available job is not running. The claim
-- itself uses the worker's own config, never this table.
CREATE TABLE awa.limits (
    name        text PRIMARY KEY,
    kind        text,
    queue       text,
    key         text NOT NULL,
    max_running integer NOT NULL CHECK (max_running >= 1),
    rate_count  integer CHECK (rate_count >= 1),
    rate_window double precision CHECK (rate_window > 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind IS NULL) <> (queue IS NULL))
);
