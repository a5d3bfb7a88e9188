"""The dashboard's reads (awa_cli/reads.py, awa_cli/db/dashboard.py) against PostgreSQL, and
the workers, kinds and audit routes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import awa_cli as awa
from awa_cli.db import dashboard
from awa_cli.serve.chart import throughput_chart
from tests.integration.serve.helpers import AS_OPERATOR, AS_VIEWER, serve

pytestmark = [pytest.mark.integration]

STATES = ["available", "failed", "completed", "scheduled"]


def fill(dsn: str, n: int = 240) -> list[tuple[int, str, str, str, list[str]]]:
    """Jobs over every combination of four states, three kinds, two queues and a tag."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, tags, finalized_at)"
            " SELECT 'k' || (g %% 3), 'q' || (g %% 2),"
            " (ARRAY['available','failed','completed','scheduled'])[1 + g / 7 %% 4]::awa.job_state,"
            " CASE WHEN g %% 5 = 0 THEN ARRAY['vip', 'x'] ELSE '{}' END,"
            " CASE WHEN g / 7 %% 4 IN (1, 2) THEN now() - g * interval '20 seconds' END"
            " FROM generate_series(1, %s) g",
            (n,),
        )
        return [
            (r[0], r[1], r[2], r[3], list(r[4]))
            for r in conn.execute(
                "SELECT id, state::text, kind, queue, tags FROM awa.jobs ORDER BY id DESC"
            )
        ]


@pytest.mark.asyncio
async def test_every_filter_combination_pages_like_a_scan(dsn: str) -> None:
    jobs = fill(dsn)
    middle = jobs[len(jobs) // 2][0]
    options = {
        "state": [None, "failed"],
        "kind": [None, "k1"],
        "queue": [None, "q0"],
        "tag": [None, "vip"],
        "before_id": [None, middle],
    }
    async with awa.AsyncClient(dsn) as client:
        for values in itertools.product(*options.values()):
            f = dict(zip(options, values, strict=True))
            expected = [
                i
                for i, state, kind, queue, tags in jobs
                if (f["state"] is None or state == f["state"])
                and (f["kind"] is None or kind == f["kind"])
                and (f["queue"] is None or queue == f["queue"])
                and (f["tag"] is None or f["tag"] in tags)
                and (f["before_id"] is None or i < f["before_id"])
            ][:20]
            got = [r.id for r in await client.list_jobs_page(**f, limit=20)]  # type: ignore[arg-type]
            assert got == expected, f
            assert expected or f["tag"] or f["kind"], f  # the data covers the filters


@pytest.mark.asyncio
async def test_counts_estimate_the_terminal_states_of_a_large_table(dsn: str) -> None:
    fill(dsn, 2000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE awa.jobs")
        exact = {
            (q, s): n
            for q, s, n in conn.execute(
                "SELECT queue, state::text, count(*) FROM awa.jobs GROUP BY 1, 2"
            )
        }
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        small = await dashboard.job_counts(conn)
        # Above the threshold with a sample as large as the table: the same exact numbers.
        whole = await dashboard.job_counts(conn, exact_below=0)
        dashboard_sample = dashboard.SAMPLE_ROWS
        try:
            dashboard.SAMPLE_ROWS = 200  # 10% of the pages
            sampled = await dashboard.job_counts(conn, exact_below=0)
        finally:
            dashboard.SAMPLE_ROWS = dashboard_sample
    assert {(r.queue, r.state): r.count for r in small} == exact
    assert not any(r.estimated for r in small)
    assert {(r.queue, r.state): r.count for r in whole} == exact
    assert not any(r.estimated for r in whole)
    live = [r for r in sampled if r.state not in dashboard.TERMINAL]
    assert {(r.queue, r.state): r.count for r in live} == {
        k: n for k, n in exact.items() if k[1] not in dashboard.TERMINAL
    }
    assert not any(r.estimated for r in live)
    assert all(r.estimated for r in sampled if r.state in dashboard.TERMINAL)
    assert [(r.queue, r.state) for r in sampled] == sorted((r.queue, r.state) for r in sampled)


@pytest.mark.asyncio
async def test_throughput_counts_the_last_hour_per_minute(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, state, finalized_at) VALUES"
            " ('a', 'completed', now()), ('a', 'completed', now()), ('a', 'failed', now()),"
            " ('a', 'completed', now() - interval '2 hours'), ('a', 'cancelled', now())"
        )
    async with awa.AsyncClient(dsn) as client:
        points = await client.throughput()
    assert [(p["completed"], p["failed"]) for p in points] == [(2, 1)]
    chart = throughput_chart(points, now=points[0]["minute"])
    assert (chart.completed, chart.failed, chart.peak) == (2, 1, 3)
    assert (
        len(chart.bars) == 60 and chart.bars[-1].completed_h > 0 and chart.bars[0].completed_h == 0
    )


def test_audit_is_listed_newest_first_with_filters(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {}, kind="k")
    with serve(dsn) as http:
        assert http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR).status_code == 200
        assert http.post(f"/api/jobs/{job.id}/cancel", headers=AS_OPERATOR).status_code == 409
        assert http.post(f"/api/jobs/{job.id}/retry", headers=AS_VIEWER).status_code == 403
        entries = http.get("/api/audit", headers=AS_VIEWER).json()["entries"]
        assert [(e["actor"], e["action"], e["result"]) for e in entries] == [
            ("serve:vera", "request", "refused"),
            ("serve:otto", "job.cancel", "refused"),
            ("serve:otto", "job.cancel", "ok"),
        ]
        assert entries[1]["target"] == f"job:{job.id}" and entries[1]["detail"]["status"] == 409
        mine = http.get("/api/audit?actor=serve:otto&action=job.cancel&limit=1", headers=AS_VIEWER)
        assert [e["result"] for e in mine.json()["entries"]] == ["refused"]
        later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert http.get("/api/audit", params={"since": later}, headers=AS_VIEWER).json() == {
            "entries": []
        }
        bad = http.get("/api/audit?since=yesterday", headers=AS_VIEWER)
        assert bad.status_code == 422 and "since" in bad.json()["error"]
        page = http.get("/audit?actor=serve:vera", headers=AS_VIEWER).text
        assert f"POST /jobs/{job.id}/retry" not in page and f"POST /api/jobs/{job.id}/retry" in page
        assert "serve:otto" not in page.split("<tbody>")[1]


def test_workers_and_kinds_routes(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO awa.workers (id, host, pid, queues, kinds, running) VALUES"
            " ('h:1:1', 'h', 1, '{\"mail\": 4}',"
            ' \'[{"kind": "greet", "queue": null, "doc": "Hello."}]\', 2),'
            " ('old:2:2', 'old', 2, '{}', '[]', 0)"
        )
        conn.execute(
            "UPDATE awa.workers SET heartbeat_at = now() - interval '1 minute' WHERE pid = 2"
        )
        awa.insert(conn, {}, kind="lonely", queue="mail")
    with serve(dsn) as http:
        workers = http.get("/api/workers", headers=AS_VIEWER).json()["workers"]
        assert [(w["id"], w["queues"], w["kinds"], w["running"]) for w in workers] == [
            ("h:1:1", {"mail": 4}, ["greet"], 2)
        ]
        kinds = http.get("/api/kinds", headers=AS_VIEWER).json()["kinds"]
        assert [(k["kind"], k["queue"], k["unhandled"], k["doc"]) for k in kinds] == [
            ("lonely", "mail", True, ""),
            ("greet", "mail", False, "Hello."),
        ]
        page = http.get("/workers", headers=AS_VIEWER).text
        assert "mail=4" in page and ">old<" not in page
        assert "no live worker" in http.get("/kinds", headers=AS_VIEWER).text
