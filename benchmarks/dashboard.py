"""The dashboard on a large table: GET / and GET /jobs (and filtered) through the real ASGI app.

    .venv/bin/python -m benchmarks.dashboard                 # 1,000,000 jobs, throwaway server
    .venv/bin/python -m benchmarks.dashboard --jobs 200000 --requests 50
    .venv/bin/python -m benchmarks.dashboard --database-url postgresql://postgres@localhost/postgres

Fills ``awa.jobs`` with one ``INSERT ... SELECT generate_series`` (95% completed over the last
day, the rest spread over every other state, 4 queues, 20 kinds, 1 job in 50 tagged ``vip``),
runs ``VACUUM ANALYZE`` (what autovacuum does to a table this size), then times each route
``--requests`` times after a warm-up through ``awa_cli.serve.app.build_app`` (the same app
``awa serve`` runs, no auth: loopback mode) and prints p50/p95 in milliseconds, and the
``EXPLAIN (ANALYZE, BUFFERS)`` plan of every statement those routes run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.server import BenchServer

FILL = """
INSERT INTO awa.jobs (kind, queue, args, state, run_at, attempt, tags, created_at,
                      attempted_at, finalized_at, heartbeat_at, callback_id, errors)
SELECT 'kind_' || (g %% 20),
       'q' || (g %% 4),
       jsonb_build_object('n', g, 'to', 'user' || g || '@example.com'),
       s.state::awa.job_state,
       CASE WHEN s.state IN ('scheduled', 'retryable') THEN now() + interval '10 minutes'
            ELSE now() - (g %% 3600) * interval '1 second' END,
       CASE WHEN s.state = 'available' THEN 0 ELSE 1 END,
       CASE WHEN g %% 50 = 0 THEN ARRAY['vip'] ELSE '{}'::text[] END,
       now() - (%(jobs)s - g) * interval '86 milliseconds',
       CASE WHEN s.state = 'available' THEN NULL ELSE now() - (%(jobs)s - g) * interval '86 milliseconds' END,
       CASE WHEN s.state IN ('completed', 'failed', 'cancelled')
            THEN now() - (%(jobs)s - g) * interval '86 milliseconds' END,
       CASE WHEN s.state = 'running' THEN now() END,
       CASE WHEN s.state = 'waiting_external' THEN gen_random_uuid() END,
       CASE WHEN s.state IN ('failed', 'retryable')
            THEN '[{"error": "Boom: failed", "attempt": 1}]'::jsonb ELSE '[]'::jsonb END
FROM generate_series(1, %(jobs)s) g,
LATERAL (SELECT CASE
    WHEN g %% 1000 < 950 THEN 'completed'
    WHEN g %% 1000 < 970 THEN 'failed'
    WHEN g %% 1000 < 975 THEN 'cancelled'
    WHEN g %% 1000 < 985 THEN 'available'
    WHEN g %% 1000 < 990 THEN 'scheduled'
    WHEN g %% 1000 < 993 THEN 'retryable'
    WHEN g %% 1000 < 995 THEN 'running'
    ELSE 'waiting_external' END AS state) s
"""

ROUTES = [
    "/",
    "/api/stats",
    "/jobs",
    "/jobs?state=failed",
    "/jobs?state=available",
    "/jobs?kind=kind_7",
    "/jobs?queue=q2",
    "/jobs?tag=vip",
    "/jobs?state=failed&kind=kind_3&queue=q3",
    "/jobs?before={middle}",
    "/workers",
    "/kinds",
    "/audit",
]


def fill(dsn: str, jobs: int) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(FILL, {"jobs": jobs})
        conn.execute("VACUUM ANALYZE awa.jobs")
        print(f"filled {jobs:,} jobs and analysed in {time.perf_counter() - started:.1f}s")
        row = conn.execute("SELECT (min(id) + max(id)) / 2 FROM awa.jobs").fetchone()
        return int(row[0]) if row else 1


async def asgi_get(app: Any, target: str) -> int:
    """One GET straight through the ASGI app (no socket, no client library); its status."""
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8477"), (b"accept", b"text/html")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8477),
    }
    status = 0
    body = bytearray()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status


async def time_routes(dsn: str, requests: int, middle: int) -> list[tuple[str, float, float]]:
    import awa_cli as awa
    from awa_cli.serve.app import ServeSettings, build_app

    client = awa.AsyncClient(dsn)
    app = build_app(client, ServeSettings(close_client=False))
    results = []
    for template in ROUTES:
        path = template.format(middle=middle)
        for _ in range(3):  # warm-up: the pool, the plan cache, the buffers
            assert await asgi_get(app, path) == 200, path
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            status = await asgi_get(app, path)
            times.append((time.perf_counter() - started) * 1000)
            assert status == 200, path
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        results.append((path, statistics.median(times), p95))
    await client.close()
    return results


def plans(dsn: str, middle: int) -> None:
    from awa_cli.db import dashboard
    from awa_cli.db.statements import SQL

    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ")
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = float(conn.execute(SQL["inspect_table_size"]).fetchone()[0])  # type: ignore[index]
        percent = min(100.0, 100.0 * dashboard.SAMPLE_ROWS / rows)
        statements: list[tuple[str, Any, dict[str, Any]]] = [
            ("inspect_active_counts", sql.SQL(SQL["inspect_active_counts"]), {}),
            (
                f"inspect_terminal_sample ({percent:.2f}%)",
                sql.SQL(SQL["inspect_terminal_sample"]),
                {"percent": percent},
            ),
            ("inspect_throughput", sql.SQL(SQL["inspect_throughput"]), {}),
            ("kinds_with_available", sql.SQL(SQL["kinds_with_available"]), {}),
        ]
        for filters in (
            {},
            {"state": "failed"},
            {"kind": "kind_7"},
            {"queue": "q2"},
            {"tag": "vip"},
            {"state": "failed", "kind": "kind_3", "queue": "q3"},
            {"before_id": middle},
        ):
            params = {n: filters.get(n) for n in dashboard.FILTERS} | {"limit": 51}
            statements.append(
                (f"inspect_jobs_page {filters}", dashboard.jobs_page_query(filters), params)
            )
        for name, statement, params in statements:
            print(f"\n-- {name}")
            for (line,) in conn.execute(explain + statement, params).fetchall():
                print(f"   {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="awa-bench-dash-") as tmp:
        server = BenchServer(args.database_url, Path(tmp))
        try:
            dsn = server.fresh_database("bench_dashboard")
            print(f"PostgreSQL {server.version()}")
            middle = fill(dsn, args.jobs)
            results = asyncio.run(time_routes(dsn, args.requests, middle))
            print(f"\n{'route':<45} {'p50 ms':>8} {'p95 ms':>8}")
            for path, p50, p95 in results:
                print(f"{path:<45} {p50:8.1f} {p95:8.1f}")
            plans(dsn, middle)
            server.drop_database(dsn)
        finally:
            server.close()


if __name__ == "__main__":
    main()
