"""Args that are valid JSON but not an object (a string, an array, a number) fail the job
terminally on its first attempt, and the worker stays healthy (architecture §5.11, issue 15 item 8).

``Exhausted`` fires for untyped hooks and plugins (with the args as stored); typed hooks and
typed follow-up specs skip the row with a warning, so the failure always commits. The rows
are written with raw SQL: the client refuses such args.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]

NOT_OBJECTS = ['"a string"', "[1, 2]", "3"]


@dataclass
class Typed:
    n: int


@dataclass
class Note:
    text: str


def insert_raw(dsn: str, kind: str, args_json: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args) VALUES (%s, 'default', %s::jsonb) RETURNING id",
            (kind, args_json),
        ).fetchone()
    assert row is not None
    return int(row[0])


def recording_app(seen: dict[str, list[Any]]) -> awa.App:
    app = awa.App()

    @app.task(Typed)
    async def typed(job: awa.Job) -> None:
        seen["ran"].append(job.id)

    @app.task(kind="untyped")
    async def untyped(job: awa.Job) -> None:
        seen["ran"].append(job.id)

    @app.on_event(Typed)
    def typed_hook(event: Any) -> None:
        seen["typed_hook"].append(event)

    for kind in ("typed", "untyped"):
        app.on_event_kind(kind, lambda event: seen["untyped_hook"].append(event))
        app.on_exhausted_enqueue(kind, Note, lambda args, job, error, attempt: Note(f"{args!r}"))
    app.on_exhausted_enqueue(Typed, Note, lambda args, job, error, attempt: Note("typed"))
    return app


def notes(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT args->>'text' FROM awa.jobs WHERE kind = 'note' ORDER BY id")
        return [r[0] for r in rows.fetchall()]


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["typed", "untyped"])
async def test_args_that_are_not_an_object_fail_terminally_on_the_first_attempt(
    dsn: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: dict[str, list[Any]] = {"ran": [], "typed_hook": [], "untyped_hook": [], "plugin": []}
    app = recording_app(seen)
    ids = [insert_raw(dsn, kind, args) for args in NOT_OBJECTS]
    caplog.set_level(logging.WARNING)
    plugin = [("recorder", seen["plugin"].append)]
    async with running_worker(app, dsn, {"default": 5}, plugin_hooks=plugin):
        await wait_until(lambda: all(job_row(dsn, i).state == "failed" for i in ids))
        await wait_until(
            lambda: sum(isinstance(e, awa.JobEvent.Exhausted) for e in seen["plugin"]) == 3
        )
        # the worker stays healthy: a well-formed job of the same kind still runs
        with awa.Client(dsn) as client:
            good = client.insert(Typed(1) if kind == "typed" else {"n": 1}, kind=kind)
        await wait_until(lambda: job_row(dsn, good.id).state == "completed")
    assert seen["ran"] == [good.id]  # no handler saw the bad rows
    for job_id, stored in zip(ids, ["a string", [1, 2], 3], strict=True):
        row = job_row(dsn, job_id)
        assert (row.state, row.attempt, len(row.errors)) == ("failed", 1, 1)
        assert row.errors[0]["terminal"] is True
        assert "not an object" in row.errors[0]["error"]
        assert row.args == stored
    exhausted = [e for e in seen["plugin"] if isinstance(e, awa.JobEvent.Exhausted)]
    assert sorted(e.job.id for e in exhausted) == ids
    assert sorted(map(repr, (e.args for e in exhausted))) == sorted(["'a string'", "[1, 2]", "3"])
    untyped = [e for e in seen["untyped_hook"] if isinstance(e, awa.JobEvent.Exhausted)]
    assert sorted(e.job.id for e in untyped) == ids  # untyped hooks get the stored value
    assert not [e for e in seen["typed_hook"] if e.job.id in ids]  # typed hooks skip the rows
    # the untyped spec ran with the stored value; the typed spec (for the typed kind) skipped
    assert sorted(notes(dsn)) == sorted(["'a string'", "[1, 2]", "3"])
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "failed inside awa" in m]
    if kind == "typed":
        assert sum("hook" in m and "skipped" in m for m in messages) >= 3
        assert sum("follow-up spec" in m and "skipped" in m for m in messages) == 3
