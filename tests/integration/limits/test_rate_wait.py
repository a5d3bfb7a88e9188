"""How long a runner whose claim came back short waits for a rate window (architecture §13):
``seconds_until_due`` with the rate limit's claim parameters (``limit_rate_free_in``)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from awa_cli.db.jobs import seconds_until_due
from awa_cli.limits import ClaimPlan, Limit
from tests.integration.limits.test_claim_limited import Core, _insert

pytestmark = [pytest.mark.integration]

RATED = Limit("rated", key="args.tenant", max_running=100, kind="k", rate_count=2, rate_window=1.0)


def _starts(dsn: str, ago: list[float]) -> None:
    with psycopg.connect(dsn) as conn:
        for seconds in ago:
            conn.execute(
                "INSERT INTO awa.limit_starts (limit_name, key, started_at)"
                " VALUES ('rated', 't', clock_timestamp() - %s * interval '1 second')",
                (seconds,),
            )


async def _wait(dsn: str, since: float) -> float | None:
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}
    ) as pool:
        return await seconds_until_due(pool, "default", ClaimPlan((RATED,)).params, since)


@pytest.mark.asyncio
async def test_a_full_window_waits_until_its_oldest_start_leaves(dsn: str) -> None:
    _starts(dsn, [0.6, 0.1])
    wait = await _wait(dsn, 0.0)
    assert wait is not None and 0.3 < wait <= 0.401


@pytest.mark.asyncio
async def test_a_start_that_left_after_the_claim_means_claim_again_at_once(dsn: str) -> None:
    # The claim (0.3 s ago) found the window full: 1.2 s and 0.1 s ago are both within 1 s of
    # it. The older start has left the window since: budget is back, so the runner must
    # claim at once, not wait for the poll (counted from now, no key is out of budget).
    _starts(dsn, [1.2, 0.1])
    assert await _wait(dsn, 0.3) == 0.001  # a millisecond late rather than early
    assert await _wait(dsn, 0.0) is None  # nothing was out of budget at the claim


@pytest.mark.asyncio
async def test_a_window_below_its_count_needs_no_wait(dsn: str) -> None:
    _starts(dsn, [0.1])
    assert await _wait(dsn, 0.2) is None


@pytest.mark.asyncio
async def test_a_claim_keeps_the_starts_a_short_claims_wait_still_counts(dsn: str) -> None:
    # A short claim's wait counts the window as it was when that claim began, a moment ago
    # (the test above). A take of the same key in between used to prune every start older
    # than one window, among them starts the wait counted: it then saw the key in budget,
    # found nothing to wait for and slept a whole poll. The take now keeps two windows.
    _insert(dsn, ["t"])
    _starts(dsn, [1.2, 2.5])  # one window < 1.2 s < two windows < 2.5 s
    rated = Limit(
        "rated",
        key="args.tenant",
        max_running=100,
        kind="tenant_work",
        rate_count=2,
        rate_window=1.0,
    )
    async with Core(dsn, ClaimPlan((rated,))) as core:
        assert len(await core.claim("default", 5)) == 1
    with psycopg.connect(dsn) as conn:
        ages = [
            float(a)
            for (a,) in conn.execute(
                "SELECT extract(epoch FROM clock_timestamp() - started_at) FROM awa.limit_starts"
                " ORDER BY started_at"
            )
        ]
    assert len(ages) == 2 and 1.2 <= ages[0] < 2.5 and ages[1] < 1.0  # 2.5 s ago is pruned
