"""A test app for the any-language enqueue tests (tests/integration/test_enqueue_clients.py,
tests/integration/test_trigger_outbox.py): real `awa worker` processes run jobs that psql, Node
and a trigger enqueued through ``awa.enqueue``, and record every execution, with the args the
handler received, in ``awa_test.polyglot_runs``, so a test can prove each job ran exactly once
and its args (unicode and all) arrived intact."""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg

import awa_cli as awa
from tests.apps.base import side_table

app = awa.App()

SIDE_TABLE = side_table(
    "polyglot_runs",
    "job_id bigint NOT NULL, kind text NOT NULL, args jsonb NOT NULL, attempt int NOT NULL,"
    " pid int NOT NULL",
)


async def _record(job: awa.Job) -> None:
    args: dict[str, Any] = job.args
    async with await psycopg.AsyncConnection.connect(
        os.environ["AWA_DATABASE_URL"], autocommit=True
    ) as conn:
        await conn.execute(
            "INSERT INTO awa_test.polyglot_runs (job_id, kind, args, attempt, pid) "
            "VALUES (%s, %s, %s::jsonb, %s, %s)",
            (job.id, job.kind, json.dumps(args), job.attempt, os.getpid()),
        )


@app.task(kind="polyglot_echo")
async def polyglot_echo(job: awa.Job) -> None:
    await _record(job)


@app.task(kind="send_receipt", queue="email")
async def send_receipt(job: awa.Job) -> None:
    await _record(job)
