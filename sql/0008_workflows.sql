-- awa 0008: dependencies between jobs and workflows (architecture §16).
--
-- A job inserted with `after=` parents is `blocked` until its last parent commits
-- `completed` (or, with on_parent_failure = 'run', until every parent is terminal). The
-- outcome core moves it in the transaction of that parent's transition
-- (awa_cli/outcomes/dependencies.py). 'blocked' is added here but used by no statement of
-- this migration: a new enum value may not be used in the transaction that adds it.
ALTER TYPE awa.job_state ADD VALUE IF NOT EXISTS 'blocked';

-- The child's side: how many parents it still waits for (decremented, one per parent, in
-- each parent's transition: a count in the child's own row, so a wide fan-in takes the
-- child's row lock once per finalising batch, never a lock on an unrelated row), and what a
-- failed or cancelled parent does to it. The parent's side: has_dependents is set when a
-- child names it (the child's insert takes the parent's row lock doing so, which orders the
-- insert with the parent's own transition), so jobs nobody waits for cost nothing extra.
ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS pending_parents integer NOT NULL DEFAULT 0;
ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS on_parent_failure text
    CHECK (on_parent_failure IN ('cancel', 'run'));
ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;
ALTER TABLE awa.jobs ADD COLUMN IF NOT EXISTS workflow_id bigint;
ALTER TABLE awa.dead_letters ADD COLUMN IF NOT EXISTS pending_parents integer NOT NULL DEFAULT 0;
ALTER TABLE awa.dead_letters ADD COLUMN IF NOT EXISTS on_parent_failure text;
ALTER TABLE awa.dead_letters ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;
ALTER TABLE awa.dead_letters ADD COLUMN IF NOT EXISTS workflow_id bigint;

-- The edges: one row per (parent, child). No foreign keys: a failed parent may move to
-- awa.dead_letters (and counts as failed there), and retention deletes a child's edges
-- with it. A parent's step name (the key of job.parent_outputs) is its metadata's awa.step.
CREATE TABLE IF NOT EXISTS awa.job_dependencies (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS job_dependencies_child_idx ON awa.job_dependencies (child_id, parent_id);

-- Workflows: a named graph of steps inserted at once. The per-state counts of a running
-- workflow are derived from its steps (never a counter every step updates); `state`,
-- `finished_at` and the final `counts` are written once, by the transition that makes the
-- workflow terminal, under a transaction-scoped advisory lock on the workflow's id.
CREATE TABLE IF NOT EXISTS awa.workflows (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    state       text NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    counts      jsonb,
    metadata    jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS workflows_created_idx ON awa.workflows (created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS workflows_state_idx ON awa.workflows (state, id);
CREATE INDEX IF NOT EXISTS jobs_workflow_idx ON awa.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_workflow_open_idx ON awa.jobs (workflow_id)
    WHERE workflow_id IS NOT NULL AND state NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX IF NOT EXISTS dead_letters_workflow_idx ON awa.dead_letters (workflow_id)
    WHERE workflow_id IS NOT NULL;
-- One workflow per periodic fire time: (schedule, fire time) is unique, as for jobs.
CREATE UNIQUE INDEX IF NOT EXISTS workflows_periodic_fire_idx
    ON awa.workflows ((metadata ->> 'awa.periodic'), (metadata ->> 'awa.fire_at'))
    WHERE metadata ? 'awa.periodic';
