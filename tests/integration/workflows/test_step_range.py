"""Migration 0018: a workflow's steps are read by the range of their ids (``first_step`` to
``last_step`` on its row), not through an index on ``awa.jobs (workflow_id)`` that every
transition of every step wrote to; and its end check reads the newest steps first."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from awa_cli.db import migrations
from awa_cli.db.statements import SQL
from benchmarks.app import Noop
from benchmarks.workflow_fan import graph

pytestmark = [pytest.mark.integration]


def test_0018_is_workflow_step_range() -> None:
    found = {m.version: m for m in migrations.available()}
    assert found[18].name == "workflow_step_range"
    assert "DROP INDEX IF EXISTS awa.jobs_workflow_idx" in found[18].sql


def _probe_buffers(conn: psycopg.Connection, workflow_id: int) -> tuple[int, Any]:
    """The buffers the end check's probe for an unfinished step reads, and what it finds
    (the third call of the connection: its plan cached, as in a worker)."""
    for _ in range(3):
        (plan,) = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT awa.workflow_open_step(w.id,"
            " w.first_step, w.last_step) FROM awa.workflows AS w WHERE w.id = %s",
            (workflow_id,),
        ).fetchone()  # type: ignore[misc]
    found = conn.execute(
        "SELECT awa.workflow_open_step(w.id, w.first_step, w.last_step) FROM awa.workflows AS w"
        " WHERE w.id = %s",
        (workflow_id,),
    ).fetchone()[0]  # type: ignore[index]
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"], found


def test_the_end_check_of_a_running_fan_out_reads_the_newest_step_first(dsn: str) -> None:
    # a 2,000-wide fan-out, 1,999 of its steps completed in batches as a worker would (each
    # leaving dead row versions behind), one running and the join still blocked
    with awa.Client(dsn) as client:
        run = client.insert_workflow(graph(2000))
    root, join = run.steps["root"].id, run.steps["join"].id
    middle = sorted(r.id for name, r in run.steps.items() if name not in ("root", "join"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = %s", (root,)
        )
        conn.execute(SQL["dep_settle"], {"ids": [root], "states": ["completed"]})
        for i in range(0, len(middle), 20):
            conn.execute(
                "UPDATE awa.jobs SET state = 'running' WHERE id = ANY (%s)", (middle[i : i + 20],)
            )
        for i in range(0, len(middle) - 1, 20):
            done = middle[i : min(i + 20, len(middle) - 1)]
            conn.execute(
                "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY (%s)",
                (done,),
            )
        buffers, found = _probe_buffers(conn, run.id)
        assert found == join  # the newest unfinished step: the workflow is not over
        # the probe walks the range down from the join: a few pages. Planned as the planner
        # likes (a bitmap scan of the whole range, then a sort) it read them all: 160 here
        assert buffers <= 30, buffers
        assert (
            conn.execute(
                "SELECT * FROM awa.workflow_finish(ARRAY[%s]::bigint[])", (run.id,)
            ).fetchall()
            == []
        )
        # the last step and the join finish: the check ends the workflow, counts and all
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY (%s)",
            ([middle[-1], join],),
        )
        ended = conn.execute(
            "SELECT * FROM awa.workflow_finish(ARRAY[%s]::bigint[])", (run.id,)
        ).fetchall()
        assert ended == [(run.id, "completed")]
        assert conn.execute(
            "SELECT counts FROM awa.workflows WHERE id = %s", (run.id,)
        ).fetchone() == ({"completed": 2002},)


def test_a_workflow_row_keeps_the_range_of_its_steps(dsn: str) -> None:
    with awa.Client(dsn) as client:
        client.insert(Noop(0))  # ids before and after it belong to other jobs
        run = client.insert_workflow(graph(3))
        client.insert(Noop(1))
        ids = sorted(r.id for r in run.steps.values())
        with psycopg.connect(dsn) as conn:
            assert conn.execute(
                "SELECT first_step, last_step FROM awa.workflows WHERE id = %s", (run.id,)
            ).fetchone() == (ids[0], ids[-1])
        assert sorted(r.id for r in client.get_workflow(run.id).steps.values()) == ids


def test_a_workflow_without_a_range_is_read_over_the_whole_table(dsn: str) -> None:
    # a workflow inserted by an awa older than 0018 during a rolling deploy has no range
    with awa.Client(dsn) as client:
        run = client.insert_workflow(graph(3))
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "UPDATE awa.workflows SET first_step = NULL, last_step = NULL WHERE id = %s",
                (run.id,),
            )
        got = client.get_workflow(run.id)
        assert set(got.steps) == {"root", "s0", "s1", "s2", "join"}
        assert got.counts == {"available": 1, "blocked": 4}
        client.cancel_workflow(run.id)
        got = client.get_workflow(run.id)
        assert got.state == "cancelled" and got.counts == {"cancelled": 5}


def test_the_migration_gives_existing_workflows_their_range(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute(SQL["migrations_ledger"])
        for m in migrations.available():
            if m.version < 18:  # the schema as an awa before 0018 left it
                conn.execute(m.sql.encode())
                conn.execute(SQL["migrations_record"], {"version": m.version, "name": m.name})
        (wf,) = conn.execute(
            "INSERT INTO awa.workflows (name) VALUES ('old') RETURNING id"
        ).fetchone()  # type: ignore[misc]
        conn.execute("INSERT INTO awa.jobs (kind, queue, args) VALUES ('other', 'q', '{}')")
        ids = [
            conn.execute(
                "INSERT INTO awa.jobs (kind, queue, args, workflow_id, state, finalized_at)"
                " VALUES ('step', 'q', '{}', %s, 'completed', now()) RETURNING id",
                (wf,),
            ).fetchone()[0]  # type: ignore[index]
            for _ in range(3)
        ]
        # one step dead-lettered: it counts, and its id can be the range's end
        conn.execute(
            "WITH gone AS (DELETE FROM awa.jobs WHERE id = %s RETURNING *)"
            " INSERT INTO awa.dead_letters (id, kind, queue, args, state, priority, attempt,"
            " max_attempts, run_at, run_lease, errors, metadata, tags, created_at, dead_at,"
            " dead_reason, workflow_id, callback_in_handler)"
            " SELECT id, kind, queue, args, 'failed', priority, attempt, max_attempts, run_at,"
            " run_lease, errors, metadata, tags, created_at, now(), 'exhausted', workflow_id, false"
            " FROM gone",
            (ids[-1],),
        )
        assert [m.version for m in migrations.migrate(conn)] == [
            m.version for m in migrations.available() if m.version >= 18
        ]
        assert conn.execute(
            "SELECT first_step, last_step FROM awa.workflows WHERE id = %s", (wf,)
        ).fetchone() == (ids[0], ids[-1])
