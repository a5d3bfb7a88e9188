"""`awa queue list|stats` through click's runner, and `--watch` on a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from tests.helpers import AwaRunner

import awa_cli as awa
from awa_cli.cli import cli

pytestmark = [pytest.mark.integration]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "awa.toml"
    path.write_text("[queues.email]\nconcurrency = 3\n[queues.default]\nconcurrency = 7\n")
    return path


def seed(dsn: str) -> None:
    with awa.Client(dsn) as client:
        client.insert_many([{"n": i} for i in range(3)], kind="mail", queue="email")
        client.insert_many([{"n": i} for i in range(2)], kind="other", queue="reports")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET run_at = now() - interval '90 seconds' WHERE queue = 'email'"
        )
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now() "
            "WHERE id = (SELECT min(id) FROM awa.jobs WHERE queue = 'reports')"
        )


def test_queue_list_json_and_table(dsn: str, config: Path) -> None:
    seed(dsn)
    runner = AwaRunner()
    result = runner.invoke(
        cli, ["--config", str(config), "--database-url", dsn, "queue", "list", "--json"]
    )
    assert result.exit_code == 0, result.output
    by_name = {q["queue"]: q for q in json.loads(result.stdout)}
    assert set(by_name) == {"default", "email", "reports"}
    assert by_name["email"]["concurrency"] == 3 and by_name["email"]["available"] == 3
    assert by_name["reports"]["configured"] is False and by_name["reports"]["jobs"] == 2
    table = runner.invoke(cli, ["--config", str(config), "--database-url", dsn, "queue", "list"])
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split("\t")[0] == "queue"


def test_queue_stats_json(dsn: str, config: Path) -> None:
    seed(dsn)
    result = AwaRunner().invoke(
        cli, ["--config", str(config), "--database-url", dsn, "--json", "queue", "stats"]
    )
    assert result.exit_code == 0, result.output
    stats = {s["queue"]: s for s in json.loads(result.stdout)}
    assert stats["email"]["counts"]["available"] == 3
    assert 89 <= stats["email"]["oldest_available_age_seconds"] < 200
    assert stats["reports"]["counts"] == {
        **{s: 0 for s in stats["reports"]["counts"]},
        "available": 1,
        "completed": 1,
    }
    assert stats["reports"]["completed_per_second"] == pytest.approx(1 / 60, abs=0.001)
    one = AwaRunner().invoke(
        cli,
        ["--config", str(config), "--database-url", dsn, "queue", "stats", "email", "--json"],
    )
    assert [s["queue"] for s in json.loads(one.stdout)] == ["email"]


def test_queue_stats_watch_refreshes_in_place_on_a_terminal(dsn: str, config: Path) -> None:
    seed(dsn)
    awa_bin = str(Path(sys.executable).parent / "awa")
    parent, child = pty.openpty()
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [awa_bin, "--config", str(config), "queue", "stats", "--watch", "--interval", "0.2"],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        close_fds=True,
    )
    os.close(child)
    output = b""
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and output.count(b"awa queue stats") < 3:
            ready, _, _ = select.select([parent], [], [], 0.2)
            if ready:
                output += os.read(parent, 65536)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(parent)
    text = output.decode(errors="replace")
    assert text.count("awa queue stats") >= 3  # redrawn several times
    assert "\x1b[" in text and "email" in text  # cursor control: refreshed in place
