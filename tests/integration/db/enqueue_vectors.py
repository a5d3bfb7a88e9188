"""Runs one case of tests/vectors/enqueue.json through a producer: the Python insert
(``awa.insert``) or the SQL function (``awa.enqueue``, ``awa.enqueue_many``), and reads back
the stored row in the vectors' form. Shared by the vector tests and the any-language client
tests (tests/integration/test_enqueue_clients.py)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import awa_cli as awa
from tests.helpers import TESTS

VECTORS: dict[str, Any] = json.loads((TESTS / "vectors" / "enqueue.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = VECTORS["cases"]

# The vectors' columns, as JSON-comparable values.
ROW_SQL = """
SELECT kind, queue, args, state::text AS state, priority, max_attempts, attempt, run_lease,
       metadata, tags, errors, encode(unique_key, 'hex') AS unique_key,
       unique_states::text[] AS unique_states, deadline_duration, ordering_key, concurrency_key,
       run_at
FROM awa.jobs WHERE id = %s
"""

# How each input field of a case is passed to awa.enqueue, as a generic client would: a
# named argument with an explicit type.
SQL_TYPES = {
    "kind": "%s::text",
    "args": "%s::jsonb",
    "queue": "%s::text",
    "priority": "%s::integer",
    "run_at": "%s::timestamptz",
    "max_attempts": "%s::integer",
    "metadata": "%s::jsonb",
    "tags": "%s::text[]",
    "unique_key": "%s::text",
    "unique_opts": "%s::jsonb",
    "deadline_duration": "%s * interval '1 second'",
    "ordering_key": "%s::text",
    "concurrency_key": "%s::text",
    "after": "%s::bigint[]",
    "on_parent_failure": "%s::text",
}

# Inserts with parents (after_cases): each creates its parents first, and "$N" stands for the
# id of parents[N] (the file's "about_after" says how).
AFTER_CASES: list[dict[str, Any]] = VECTORS.get("after_cases", [])

# A parent moved to the dead-letter queue (as `awa dlq move` moves a failed job).
_DEAD_LETTER = """
WITH moved AS (DELETE FROM awa.jobs WHERE id = %s RETURNING *)
INSERT INTO awa.dead_letters
SELECT d.* FROM moved, LATERAL jsonb_populate_record(NULL::awa.dead_letters,
    to_jsonb(moved) || jsonb_build_object('dead_at', now(), 'dead_reason', 'manual')) AS d
"""


def cases(side: str, kind: str) -> list[Any]:
    """The cases ``side`` ("python" or "sql") can express, that expect ``kind`` (row or error)."""
    import pytest

    return [
        pytest.param(case, id=case["name"])
        for case in CASES
        if case.get("only", side) == side and kind in case
    ]


def stored_row(
    conn: psycopg.Connection[Any], job_id: int, expected: dict[str, Any]
) -> dict[str, Any]:
    """The job's row in the vectors' form (run_at only when ``expected`` has one)."""
    cur = conn.execute(ROW_SQL, (job_id,))
    names = [d.name for d in cur.description or ()]
    record = cur.fetchone()
    assert record is not None, f"job {job_id} not stored"
    row = dict(zip(names, record, strict=True))
    run_at = row.pop("run_at")
    if "run_at" in expected:
        assert run_at == datetime.fromisoformat(expected["run_at"]), (run_at, expected["run_at"])
        row["run_at"] = expected["run_at"]
    return row


def python_options(case: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Args and insert options for ``awa.insert`` from a case's input."""
    options = dict(case["input"])
    args = options.pop("args", {})
    if "run_at" in options:
        options["run_at"] = datetime.fromisoformat(options["run_at"])
    return args, options


def python_insert(conn: psycopg.Connection[Any], case: dict[str, Any]) -> int:
    args, options = python_options(case)
    return awa.insert(conn, args, **options).id


def sql_call(inputs: dict[str, Any]) -> tuple[str, list[Any]]:
    """``SELECT awa.enqueue(name => value, ...)`` for the given inputs."""
    parts, values = [], []
    for name, value in inputs.items():
        parts.append(f"{name} => {SQL_TYPES[name]}")
        values.append(Jsonb(value) if SQL_TYPES[name].endswith("jsonb") else value)
    return f"SELECT awa.enqueue({', '.join(parts)})", values


def sql_enqueue(conn: psycopg.Connection[Any], case: dict[str, Any]) -> int | None:
    statement, values = sql_call(case["input"])
    record = conn.execute(statement, values).fetchone()
    assert record is not None
    job_id: int | None = record[0]
    return job_id


def job_count(conn: psycopg.Connection[Any]) -> int:
    record = conn.execute("SELECT count(*) FROM awa.jobs").fetchone()
    assert record is not None
    return int(record[0])


def after_cases(kind: str) -> list[Any]:
    """The after_cases that expect ``kind`` (row or error), as pytest params."""
    import pytest

    return [pytest.param(case, id=case["name"]) for case in AFTER_CASES if kind in case]


def make_parents(conn: psycopg.Connection[Any], states: list[str]) -> list[int]:
    """One job of kind ``parent`` per state (``dead_letter``: moved to awa.dead_letters)."""
    ids = []
    for state in states:
        job_id = awa.insert(conn, {}, kind="parent").id
        stored = "failed" if state == "dead_letter" else state
        conn.execute("UPDATE awa.jobs SET state = %s WHERE id = %s", (stored, job_id))
        if state == "dead_letter":
            conn.execute(_DEAD_LETTER, (job_id,))
        ids.append(job_id)
    return ids


def resolve(value: Any, ids: list[int]) -> Any:
    """``value`` with every "$N" replaced by the id of parents[N]."""
    if isinstance(value, dict):
        return {k: resolve(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, ids) for v in value]
    if isinstance(value, str) and "$" in value:
        if value[0] == "$" and value[1:].isdigit():
            return ids[int(value[1:])]
        for n in range(len(ids) - 1, -1, -1):  # $10 before $1
            value = value.replace(f"${n}", str(ids[n]))
    return value


def resolved_case(conn: psycopg.Connection[Any], case: dict[str, Any]) -> dict[str, Any]:
    """An after_case with its parents created (their ids in ``parent_ids``) and its "$N"
    resolved."""
    ids = make_parents(conn, case["parents"])
    out = resolve({k: v for k, v in case.items() if k != "parents"}, ids)
    out["parents"], out["parent_ids"] = case["parents"], ids
    return out


def dependency_facts(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    """The child's dependency columns and edges in the vectors' form (edges sorted)."""
    record = conn.execute(
        "SELECT pending_parents, on_parent_failure FROM awa.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert record is not None
    edges = conn.execute(
        "SELECT parent_id FROM awa.job_dependencies WHERE child_id = %s ORDER BY parent_id",
        (job_id,),
    ).fetchall()
    return {
        "pending_parents": record[0],
        "on_parent_failure": record[1],
        "edges": [e[0] for e in edges],
    }


def flagged_parents(conn: psycopg.Connection[Any]) -> list[int]:
    """The ids of jobs flagged has_dependents."""
    rows = conn.execute("SELECT id FROM awa.jobs WHERE has_dependents ORDER BY id").fetchall()
    return [r[0] for r in rows]
