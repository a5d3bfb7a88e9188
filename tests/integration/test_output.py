"""Job output: ``job.set_output(value)`` stored on completion in ``awa.jobs.output``, carried by
``Completed``, hidden from follow-up specs, printed by ``awa job show`` (architecture §2, §3)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import pytest
import awa_cli as awa
from awa_cli.testing import AsyncAwaTestClient, HandlerJob
from tests.helpers import awa_on, job_row, running_worker, wait_until

pytestmark = [pytest.mark.integration]

AT = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
REF = uuid.UUID("12345678-1234-5678-1234-567812345678")


@dataclass
class Resolve:
    mode: str = "ok"


@dataclass
class Notify:
    resolve_job: int


def output_app(events: list[Any], spec_rows: list[awa.JobRow]) -> awa.App:
    app = awa.App()

    @app.task(Resolve)
    async def resolve(job: awa.Job) -> awa.JobResult | None:
        match job.args.mode:
            case "ok":
                job.set_output({"first": True})
                job.set_output(
                    {"item_id": 42, "at": AT, "ref": REF, "tags": ["a", "b"]}
                )  # last one wins
                job.enqueue_on_completion(Notify(resolve_job=job.id))  # the value goes in args
                return None
            case "none":
                return None
            case "retry":
                job.set_output({"not": "stored"})
                return awa.RetryAfter(60)
            case "bad":
                job.set_output({"x": object()})
            case "nan":
                job.set_output({"x": float("nan")})
            case "nul":
                job.set_output({"x": "a\x00"})
        return None

    @app.on_event(Resolve)
    def record(event: Any) -> None:
        events.append(event)

    @app.on_completed_enqueue_with(Resolve, Notify)
    def spec(args: Resolve, job: awa.JobRow) -> None:
        spec_rows.append(job)
        return None

    return app


EXPECTED = {"item_id": 42, "at": AT.isoformat(), "ref": str(REF), "tags": ["a", "b"]}


@pytest.mark.asyncio
async def test_output_is_stored_carried_by_completed_and_hidden_from_specs(dsn: str) -> None:
    events: list[Any] = []
    spec_rows: list[awa.JobRow] = []
    app = output_app(events, spec_rows)
    async with awa.AsyncClient(dsn) as client:
        job = await client.insert(Resolve())
    async with running_worker(app, dsn):
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
        await wait_until(lambda: any(isinstance(e, awa.JobEvent.Completed) for e in events))
    row = job_row(dsn, job.id)
    assert row.output == EXPECTED
    [completed] = [e for e in events if isinstance(e, awa.JobEvent.Completed)]
    assert completed.output == EXPECTED and completed.job.output == EXPECTED
    [seen] = spec_rows
    assert seen.id == job.id and seen.state == "completed" and seen.output is None
    async with awa.AsyncClient(dsn) as client:
        [notify] = await client.list_jobs(kind="notify")
    assert notify.args == {"resolve_job": job.id} and notify.output is None


@pytest.mark.asyncio
@pytest.mark.parametrize(("mode", "outcome"), [("none", "completed"), ("retry", "retryable")])
async def test_no_output_or_not_completed_leaves_the_column_empty(
    dsn: str, mode: str, outcome: str
) -> None:
    events: list[Any] = []
    async with AsyncAwaTestClient(dsn, output_app(events, [])) as tc:
        await tc.insert(Resolve(mode))
        result = await tc.work_one(Resolve)
    assert result.outcome == outcome and result.job.output is None
    if outcome == "completed":
        [completed] = [e for e in events if isinstance(e, awa.JobEvent.Completed)]
        assert completed.output is None


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["bad", "nan", "nul"])
async def test_set_output_validates(dsn: str, mode: str) -> None:
    async with AsyncAwaTestClient(dsn, output_app([], [])) as tc:
        await tc.insert(Resolve(mode))
        result = await tc.work_one(Resolve)
    assert result.outcome == "retryable" and result.job.output is None
    assert result.job.errors[-1]["error"].startswith("ValidationError: output")


def test_handler_job_records_the_output() -> None:
    job = HandlerJob(Resolve())
    job.set_output({"at": AT})
    assert job.output == {"at": AT.isoformat()} and job.has_output
    with pytest.raises(awa.ValidationError, match="output"):
        job.set_output({1, 2})


def test_awa_job_show_prints_the_output(dsn: str, tmp_path: Path) -> None:
    config = tmp_path / "awa.toml"
    config.write_text("[worker]\nprocesses = 1\n", encoding="utf-8")
    app = output_app([], [])

    async def run() -> int:
        async with awa.AsyncClient(dsn) as client:
            job = await client.insert(Resolve())
        async with running_worker(app, dsn):
            await wait_until(lambda: job_row(dsn, job.id).state == "completed")
        return job.id

    job_id = asyncio.run(run())
    result = awa_on(dsn, config, "job", "show", str(job_id))
    assert result.exit_code == 0, result.output
    assert f"output: {json.dumps(EXPECTED, sort_keys=True)}" in result.stdout
    as_json = awa_on(dsn, config, "job", "show", str(job_id), "--json")
    assert json.loads(as_json.stdout)["output"] == EXPECTED
