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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


class StatsWatch:
    """`awa queue stats --watch` on a pseudo-terminal ``columns`` wide, its output gathered."""

    def __init__(self, dsn: str, config: Path, columns: int) -> None:
        awa_bin = str(Path(sys.executable).parent / "awa")
        self.parent, child = pty.openpty()
        env = {**os.environ, "AWA_DATABASE_URL": dsn, "COLUMNS": str(columns)}
        env |= {"LINES": "40", "TERM": "xterm"}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [awa_bin, "--config", str(config), "queue", "stats", "--watch", "--interval", "0.2"],
            stdin=child,
            stdout=child,
            stderr=child,
            env=env,
            close_fds=True,
        )
        os.close(child)
        self.output = b""

    def read_until(self, done: Callable[[bytes], bool], timeout: float = 30) -> None:
        """Gather output until ``done(output)``; fail if the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while not done(self.output):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output[-2000:]
            ready, _, _ = select.select([self.parent], [], [], 0.2)
            if ready:
                self.output += os.read(self.parent, 65536)

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.parent)


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
    watch = StatsWatch(dsn, config, columns=160)
    try:
        watch.read_until(lambda output: output.count(b"awa queue stats") >= 3, timeout=15)
        assert watch.interrupt() == 0
    finally:
        watch.close()
    text = watch.output.decode(errors="replace")
    assert text.count("awa queue stats") >= 3  # redrawn several times
    assert "\x1b[" in text and "email" in text  # cursor control: refreshed in place


def test_queue_stats_of_an_unknown_queue_exits_4(dsn: str, config: Path) -> None:
    base = ["--config", str(config), "--database-url", dsn, "queue", "stats"]
    result = AwaRunner().invoke(cli, [*base, "nosuchqueue"])
    assert result.exit_code == 4, result.output
    assert result.stderr.strip().splitlines() == [
        "Error: queue 'nosuchqueue' is not configured and holds no jobs"
    ]
    assert result.stdout == ""
    configured_but_empty = AwaRunner().invoke(cli, [*base, "email", "--json"])
    assert configured_but_empty.exit_code == 0  # a configured queue is known, empty or not
    assert json.loads(configured_but_empty.stdout)[0]["counts"]["available"] == 0


def _count_available(output: str) -> list[str]:
    """The 'available' column of the email row of each table printed (TSV, piped)."""
    header = ["queue", "paused", *[s.value for s in awa.JobState]]
    column = header.index("available")
    return [line.split("\t")[column] for line in output.splitlines() if line.startswith("email\t")]


@pytest.mark.parametrize("how", ["restart", "terminate"])
def test_queue_stats_watch_survives_a_lost_connection(
    own_server: Any, config: Path, how: str
) -> None:
    """D14: a real `awa queue stats --watch` (output to a pipe) across a server restart or
    the termination of its backend: it says 'disconnected, retrying', does not exit, and
    shows new numbers once the database is back."""
    from awa_cli.db.migrations import migrate_dsn

    dsn = own_server.dsn_for("postgres")
    migrate_dsn(dsn)
    with awa.Client(dsn) as client:
        client.insert({"n": 1}, kind="mail", queue="email")
    awa_bin = str(Path(sys.executable).parent / "awa")
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "NO_COLOR": "1"}
    env.pop("AWA_CONFIG", None)
    out_path, err_path = config.parent / "out.txt", config.parent / "err.txt"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            [awa_bin, "--config", str(config), "queue", "stats", "--watch", "--interval", "0.2"],
            stdout=out,
            stderr=err,
            env=env,
        )

    def wait_for(what: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert proc.poll() is None, err_path.read_text()  # the watch never exits
            assert time.monotonic() < deadline, out_path.read_text() + err_path.read_text()
            time.sleep(0.05)

    try:
        wait_for(lambda: "1" in _count_available(out_path.read_text()))
        if how == "restart":
            own_server.server.stop("fast")
        else:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE (query LIKE '%%completed_last_minute%%' OR query LIKE '%%RECURSIVE runnable%%')"
                    " AND pid <> pg_backend_pid()"
                )
        wait_for(lambda: "disconnected, retrying" in err_path.read_text())
        if how == "restart":
            time.sleep(0.5)  # a few failed refreshes while it is down
            own_server.server.start()
        with awa.Client(dsn) as client:
            client.insert({"n": 2}, kind="mail", queue="email")
        wait_for(lambda: "2" in _count_available(out_path.read_text()))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    errors = err_path.read_text()
    assert errors.count("disconnected, retrying") == 1, errors  # once per outage when piped
    assert "reconnected after" in errors and "Traceback" not in errors
    assert "psycopg.pool" not in errors


def test_queue_stats_watch_on_a_terminal_keeps_the_table_while_disconnected(
    own_server: Any, config: Path
) -> None:
    from awa_cli.db.migrations import migrate_dsn

    dsn = own_server.dsn_for("postgres")
    migrate_dsn(dsn)
    seed(dsn)
    watch = StatsWatch(dsn, config, columns=200)
    try:
        watch.read_until(lambda output: b"updated" in output)
        own_server.server.stop("fast")
        watch.read_until(lambda output: b"disconnected, retrying" in output)
        output = watch.output
        during = output[output.rindex(b"disconnected, retrying") - 3000 :]
        assert b"email" in during and b"reports" in during  # the last table is still drawn
        mark = len(output)
        own_server.server.start()
        watch.read_until(lambda output: b"updated" in output[mark:])
        assert watch.interrupt() == 0
    finally:
        watch.close()
    output = watch.output
    assert b"Traceback" not in output and b"psycopg.pool" not in output
