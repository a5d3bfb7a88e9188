-- The migration runner's own statements (the migrations themselves are the files of the
-- top-level sql/ folder, shipped as awa_cli.sql).

-- name: migrations_ledger
-- Two statements, run without parameters (psycopg sends them in one simple query).
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_ledger_exists
SELECT to_regclass('awa.schema_migrations') IS NOT NULL;

-- name: migrations_applied
SELECT version, applied_at FROM awa.schema_migrations;

-- name: migrations_record
INSERT INTO awa.schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: migrations_lock
-- Concurrent runs are safe: the second waits, then finds nothing to do.
SELECT pg_advisory_lock(%(key)s);

-- name: migrations_unlock
SELECT pg_advisory_unlock(%(key)s);
