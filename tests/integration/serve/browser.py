"""A real ``awa serve`` process and a real headless Chromium, for the browser tests and the
README's screenshots.

Chromium is the system package (``/usr/bin/chromium``, installed by ``.ci/run``), driven by
Playwright's Python API pointed at that executable: nothing is downloaded. Without the
binary the tests skip with the reason, except in CI (``CI=true``), where a missing browser
fails the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import awa_cli as awa
from awa_cli.periodic import Schedule
from tests.helpers import ROOT

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
VIEWER_TOKEN = "browser-viewer-token-0123456789"
OPERATOR_TOKEN = "browser-operator-token-0123456789"
CONFIG = """
[serve]
tokens = { vera = { token_env = "SERVE_TEST_VIEWER", role = "viewer" }, otto = { token_env = "SERVE_TEST_OPERATOR", role = "operator" } }
"""


# the dashboard pages that list something (the browser tests walk each of them)
LIST_PAGES = [
    "/",
    "/jobs",
    "/queues",
    "/queues/email",
    "/dlq",
    "/periodic",
    "/workers",
    "/kinds",
    "/audit",
]


def require_chromium() -> str:
    """The browser's path; skips (or fails, in CI) when it is not installed."""
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return CHROMIUM
    reason = f"{CHROMIUM} is missing (apt-get install -y chromium; .ci/run installs it)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI needs the browser tests: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    url: str
    host: str
    proc: subprocess.Popen[str]
    requests: list[str] = field(default_factory=list)

    def foreign(self) -> list[str]:
        """Every URL the browser asked for that is not on this server."""
        return [u for u in self.requests if urlsplit(u).netloc != self.host]


@contextlib.contextmanager
def awa_serve(dsn: str, tmp: Path, extra_config: str = "") -> Iterator[Served]:
    """``awa serve`` as a subprocess on a free loopback port, with a viewer and an operator
    token (and ``extra_config`` appended to its awa.toml); stopped with SIGTERM (it must
    exit 0)."""
    port = free_port()
    (tmp / "awa.toml").write_text(CONFIG + extra_config)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWA_")},
        "AWA_DATABASE_URL": dsn,
        "SERVE_TEST_VIEWER": VIEWER_TOKEN,
        "SERVE_TEST_OPERATOR": OPERATOR_TOKEN,
        "PYTHONPATH": str(ROOT),
        "NO_COLOR": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa_cli", "--config", str(tmp / "awa.toml"), "serve"]
        + ["--port", str(port)],
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                    assert json.loads(response.read()) == {"status": "ok"}
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "awa serve did not come up"
                time.sleep(0.1)
        yield Served(url, f"127.0.0.1:{port}", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
        assert proc.returncode == 0, stderr


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's Browser)."""
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, served: Served, width: int = 1440, height: int = 900) -> Any:
    """A page in a fresh context that records every request it makes."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.on("request", lambda request: served.requests.append(request.url))
    page.set_default_timeout(15_000)
    return page


def log_in(page: Any, served: Served, token: str, next_path: str = "/") -> None:
    """Sign in through the login form, as a person would."""
    page.goto(f"{served.url}{next_path}")
    assert "/login" in page.url
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{served.url}{next_path}")


@contextlib.contextmanager
def signed_in(
    dsn: str,
    tmp: Path,
    token: str,
    next_path: str = "/",
    *,
    size: tuple[int, int] = (1440, 900),
    csp_log: list[str] | None = None,
    extra_config: str = "",
) -> Iterator[tuple[Served, Any]]:
    """The frame of every browser test: ``awa serve``, a Chromium page of ``size`` (width,
    height) and a sign-in with ``token`` that lands on ``next_path``; the console's
    Content-Security-Policy messages go to ``csp_log`` (from before the sign-in) when given;
    ``extra_config`` is appended to the server's awa.toml."""
    with awa_serve(dsn, tmp, extra_config) as served, chromium() as browser:
        page = new_page(browser, served, *size)
        if csp_log is not None:
            page.on(
                "console",
                lambda m: csp_log.append(m.text) if "Content Security Policy" in m.text else None,
            )
        log_in(page, served, token, next_path)
        yield served, page


def no_horizontal_scroll(page: Any) -> bool:
    return bool(
        page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        and page.evaluate("document.body.scrollWidth <= window.innerWidth")
    )


@dataclass
class Seeded:
    available: list[int]
    failed: list[int]
    vip: list[int]
    waiting: int
    completed: int
    worker_id: str
    dead: int  # a dead letter (kind export, queue reports)
    schedule: str  # a stored periodic schedule
    importing: int  # running, attempt 2 of 3 at 60 %, attempt 1 retried, one follow-up
    follow_up: int  # the follow-up importing produced


def seed(dsn: str) -> Seeded:
    """Known data: email (available, one tagged vip), reports (failed), a job waiting on a
    callback, an hour of completed and failed history for the chart, and one live worker
    (for kind send_email on queue email; kind report has no live worker)."""
    with psycopg.connect(dsn) as conn:
        available = [
            awa.insert(
                conn,
                {"to": f"user{n}@example.com"},
                kind="send_email",
                queue="email",
                tags=["vip"] if n == 2 else [],
            ).id
            for n in range(5)
        ]
        failed = [
            awa.insert(conn, {"report": n}, kind="report", queue="reports").id for n in range(2)
        ]
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(),"
            ' errors = \'[{"error": "ReportError: no data", "attempt": 1}]\'::jsonb'
            " WHERE id = ANY(%s)",
            (failed,),
        )
        awa.insert(conn, {"report": 9}, kind="report", queue="reports")  # nobody runs it
        waiting = awa.insert(conn, {"order": 7}, kind="charge", queue="payments").id
        conn.execute(
            "UPDATE awa.jobs SET state = 'waiting_external', attempt = 1, attempted_at = now(),"
            " callback_id = gen_random_uuid(), callback_timeout_at = now() + interval '1 hour'"
            " WHERE id = %s",
            (waiting,),
        )
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, attempted_at, finalized_at)"
            " SELECT 'send_email', 'email', CASE WHEN g % 17 = 0 THEN 'failed' ELSE 'completed'"
            " END::awa.job_state, 1, now() - t, now() - t FROM generate_series(1, 390) g,"
            " LATERAL (SELECT (3200 * (g / 390.0) ^ 1.6 + 40 * abs(sin(g))) * interval '1 second'"
            " AS t) times"
        )
        completed = conn.execute(
            "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
        ).fetchone()[0]  # type: ignore[index]
        worker_id = "build-host:4242:1764576000"
        conn.execute(
            "INSERT INTO awa.workers (id, host, pid, queues, kinds, running, version)"
            " VALUES (%s, 'build-host', 4242, '{\"email\": 10}',"
            ' \'[{"kind": "send_email", "queue": "email", "doc": "Send one email."}]\','
            " 3, '1.0')",
            (worker_id,),
        )
        vip = [available[2]]
        dead = awa.insert(conn, {"export": "q3"}, kind="export", queue="reports").id
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 3, finalized_at = now(),"
            ' errors = \'[{"error": "ExportError: disk full", "attempt": 3}]\'::jsonb'
            " WHERE id = %s",
            (dead,),
        )
    with awa.Client(dsn) as client:
        assert client.move_failed_to_dlq(kind="export") == 1
    asyncio.run(_store_schedule(dsn))
    importing, follow_up = _seed_history(dsn)
    return Seeded(
        available,
        failed,
        vip,
        waiting,
        int(completed),
        worker_id,
        dead,
        SCHEDULE.name,
        importing,
        follow_up,
    )


def _seed_history(dsn: str) -> tuple[int, int]:
    """A job with a history: its first attempt retried on one worker, its second running on
    another at 60 % (as ``Job.progress`` reports it), and the follow-up its retry produced
    (metadata ``awa.trigger_id``, as the outcome core writes it)."""
    with psycopg.connect(dsn) as conn:
        job = awa.insert(conn, {"batch": "2026-11"}, kind="import_orders", queue="imports")
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 2, max_attempts = 3,"
            " created_at = now() - interval '6 minutes', run_at = now() - interval '6 minutes',"
            " attempted_at = now() - interval '90 seconds', attempted_by = 'build-host:4242:1',"
            " progress = jsonb_build_object('percent', 60, 'message',"
            " 'copying orders: 6,000 of 10,000', 'checkpoint', '{\"offset\": 6000}'::jsonb,"
            " 'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"')),"
            " errors = jsonb_build_array(jsonb_build_object('error',"
            " 'ConnectionError: connection reset by peer', 'attempt', 1, 'terminal', false,"
            " 'worker', 'old-host:77:1', 'started_at', (now() - interval '5 minutes')::text,"
            " 'at', (now() - interval '4 minutes')::text))"
            " WHERE id = %s",
            (job.id,),
        )
        follow_up = awa.insert(
            conn,
            {"batch": "2026-11", "attempt": 1},
            kind="notify_ops",
            queue="imports",
            metadata={"awa.trigger_id": job.id},
        )
    return job.id, follow_up.id


SCHEDULE = Schedule("nightly-report", "0 3 * * *", "report", {"day": "yesterday"}, "Europe/Berlin")


async def _store_schedule(dsn: str) -> None:
    async with awa.AsyncClient(dsn) as client:
        await client.core.register_schedules([SCHEDULE])
        await client.core.fire_periodic()  # computes its first fire time


def heartbeat(dsn: str) -> None:
    """The seeded worker heartbeats now, as a live one does (it counts as live for 30 s: a
    long test on a loaded machine outlives the heartbeat the seed gave it)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE awa.workers SET heartbeat_at = now()")


def claim(dsn: str, queue: str) -> list[int]:
    """What a worker's claim of ``queue`` takes now (the worker's own claim statement)."""

    async def main() -> list[int]:
        async with awa.AsyncClient(dsn) as client:
            await client.ensure_open()
            return [row.id for row in await client.core.claim(queue, 10)]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop is running
        return pool.submit(asyncio.run, main()).result()


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
    return {state: int(n) for state, n in rows}
