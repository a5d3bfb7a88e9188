"""A queue runner whose short claim's wait finds nothing to wait for claims once more before
sleeping a poll (worker/queues.py ``_until_next_due``): the claim and the wait's read are two
statements, and a rate window can free between them in a way the read does not see as "was
out of budget" (`limited_rate` lost a whole poll, a window of 20-80 starts instead of 100).
The runner is the real one; the context's claim and wait are stand-ins for the worker's, so
the loop's decisions are what is tested (the claims and waits against PostgreSQL are in
tests/integration/limits/)."""

from __future__ import annotations

import asyncio
import time

import pytest

from awa_cli.jobs import JobRow
from awa_cli.worker.queues import QueueRunner, QueueSpec
from awa_cli.worker.services import RunnerContext


def _runner(claims: list[float], poll: float) -> tuple[QueueRunner, list[bool]]:
    stopping = [False]

    async def claim(queue: str, limit: int, deadline: float) -> list[JobRow]:
        claims.append(time.monotonic())
        return []  # nothing runnable: every claim is short

    async def until_due(queue: str, since: float) -> float | None:
        return None  # and the wait finds nothing to wait for

    async def nothing() -> None:
        return None

    context = RunnerContext(
        claim=claim,
        seconds_until_due=until_due,
        started=lambda row: None,
        execute=None,  # type: ignore[arg-type]  # never called: nothing is claimed
        submit=lambda result: None,
        finalizing=lambda: 0,
        lost=lambda job_id: None,
        is_stopping=lambda: stopping[0],
        recheck_claims=nothing,
        poll_interval=poll,
    )
    return QueueRunner(QueueSpec("q", concurrency=2), context), stopping


@pytest.mark.asyncio
async def test_a_short_claim_with_nothing_to_wait_for_claims_once_more_then_polls() -> None:
    claims: list[float] = []
    runner, stopping = _runner(claims, poll=1.0)
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0.5)
    # the first claim, and at once the recheck; then the poll's wait (not one more claim)
    assert len(claims) == 2 and claims[1] - claims[0] < 0.4
    await asyncio.sleep(1.0)  # 1.5 s in: the poll at 1 s claimed, the next is at 2 s
    # one claim per poll while idle: the recheck is paid once when the queue goes idle
    assert len(claims) == 3
    stopping[0] = True
    runner.wake()
    await asyncio.wait_for(task, timeout=5)
