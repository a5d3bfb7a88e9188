-- Databases for tests (awa_cli.testing_plugin, the throwaway cluster). psycopg.sql
-- templates: the caller composes the database names as Identifiers.

-- name: create_database
CREATE DATABASE {};

-- name: create_database_from_template
CREATE DATABASE {} TEMPLATE {};

-- name: drop_database
DROP DATABASE IF EXISTS {} WITH (FORCE);

-- name: database_exists
SELECT 1 FROM pg_database WHERE datname = %(name)s;
