"""`awa worker` and one-shot commands against a database they cannot use (issue 16 item 5,
D6, D13): one clear line, the password redacted, a non-zero exit within seconds, and never a
worker that says "started" and then retries forever. Real `awa` processes, a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from tests.helpers import ROOT

pytestmark = pytest.mark.integration

AWA = str(Path(sys.executable).parent / "awa")


def awa(
    tmp_path: Path, url: str, *argv: str, timeout: float = 30
) -> tuple[subprocess.CompletedProcess[str], float]:
    config = tmp_path / "awa.toml"
    if not config.exists():
        config.write_text('[app]\nmodules = ["tests.apps.recording"]\n')
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    for name in ("AWA_CONFIG", "AWA_DATABASE_URL", "NOTIFY_SOCKET"):
        env.pop(name, None)
    started = time.monotonic()
    done = subprocess.run(
        [AWA, "--config", str(config), "--database-url", url, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )
    return done, time.monotonic() - started


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and "started" not in done.stderr
    return lines[0]


def with_user(dsn: str, **params: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(dsn), **params})  # type: ignore[arg-type]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_worker_against_an_unreachable_server_says_so_once_and_exits_1(
    tmp_path: Path, processes: str
) -> None:
    url = "postgresql://someone:s3cret@127.0.0.1:1/nowhere"
    done, took = awa(tmp_path, url, "worker", "--processes", processes)
    line = one_line(done)
    assert done.returncode == 1 and took < 15
    assert (
        line
        == "Error: cannot connect to postgresql://someone:***@127.0.0.1:1/nowhere: connection refused"
    )


def test_worker_refused_by_the_server_or_missing_database_exits_1(
    tmp_path: Path, pg_server: object, dsn: str
) -> None:
    refused = with_user(dsn, user="no_such_role_awa")
    done, _ = awa(tmp_path, refused, "worker")
    line = one_line(done)
    assert done.returncode == 1 and "cannot connect to" in line
    assert 'role "no_such_role_awa" does not exist' in line
    missing = with_user(dsn, dbname="no_such_db_awa")
    done, _ = awa(tmp_path, missing, "worker")
    line = one_line(done)
    assert done.returncode == 1
    assert "cannot connect to" in line and 'database "no_such_db_awa" does not exist' in line


@pytest.mark.parametrize("processes", ["1", "2"])
def test_worker_against_an_unmigrated_database_says_run_awa_migrate(
    tmp_path: Path, fresh_dsn: str, processes: str
) -> None:
    done, took = awa(tmp_path, fresh_dsn, "worker", "--processes", processes)
    line = one_line(done)
    dbname = psycopg.conninfo.conninfo_to_dict(fresh_dsn)["dbname"]
    assert done.returncode == 1 and took < 15
    assert line == f"Error: awa schema not found in {dbname}: run awa migrate"


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "list"],
        ["job", "show", "1"],
        ["job", "enqueue", "k", "--args", "{}", "--force"],
        ["queue", "list"],
        ["rescue", "run"],
    ],
)
def test_one_shot_commands_against_an_unmigrated_database(
    tmp_path: Path, fresh_dsn: str, argv: list[str]
) -> None:
    done, _ = awa(tmp_path, fresh_dsn, *argv)
    line = one_line(done)
    assert done.returncode == 1
    assert line.startswith("Error: awa schema not found") and line.endswith(": run awa migrate")


@pytest.mark.parametrize("url", ["not a url", "mysql://u:pw@localhost/x", "http://localhost/"])
def test_an_invalid_database_url_is_a_usage_error(tmp_path: Path, url: str) -> None:
    for argv in (["job", "list"], ["worker"], ["config", "check"]):
        done, _ = awa(tmp_path, url, *argv)
        line = one_line(done)
        assert done.returncode == 2
        assert line.startswith("Error: invalid database URL: expected postgresql://")
        assert "pw" not in line


def test_pool_failures_become_one_awa_line_per_backoff_step() -> None:
    import logging

    from awa_cli.db.pool_logs import ReconnectReport

    now = [0.0]
    report = ReconnectReport(clock=lambda: now[0])
    error = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: '
        "Connection refused\n\tIs the server running on that host?"
    )

    def failure() -> logging.LogRecord:
        return logging.LogRecord(
            "psycopg.pool",
            logging.WARNING,
            "x",
            1,
            "error connecting in %r: %s",
            ("pool-1", error),
            None,
        )

    shown = []
    for tenth in range(100):  # 10 s of a failure every 0.1 s
        now[0] = tenth / 10
        record = failure()
        if report.filter(record):
            shown.append((now[0], record.getMessage(), record.name))
    assert [round(t, 1) for t, _, _ in shown] == [0.0, 1.0, 3.0, 7.0]  # steps of 1, 2, 4 s
    assert all(name == "awa.db" for _, _, name in shown)
    assert shown[0][1] == (
        "database connection failed: connection refused (retrying; next report in 1s at most)"
    )
    assert "; 9 more failed attempts" in shown[1][1] and "\n" not in shown[1][1]
    now[0] += 100  # a quiet spell: the next failure is reported at once, from the first step
    record = failure()
    assert report.filter(record) and "next report in 1s" in record.getMessage()
    info = logging.LogRecord("psycopg.pool", logging.INFO, "x", 1, "connection given", (), None)
    assert report.filter(info)  # everything else passes (the logger's level decides)


def test_a_running_worker_whose_server_goes_away_logs_no_pool_flood(
    tmp_path: Path, own_server: object
) -> None:
    from awa_cli.db.migrations import migrate_dsn

    cluster = own_server
    dsn = cluster.dsn_for("postgres")  # type: ignore[attr-defined]
    migrate_dsn(dsn)
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.recording"]\n')
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "AWA_DATABASE_URL": dsn}
    env.pop("NOTIFY_SOCKET", None)
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [AWA, "--config", str(config), "worker"], env=env, cwd=ROOT, stderr=err
        )
    try:
        deadline = time.monotonic() + 30
        while " started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        before = len(log.read_text().splitlines())
        cluster.server.stop("fast")  # type: ignore[attr-defined]
        time.sleep(4)  # the outage whose log is measured
        outage = log.read_text().splitlines()[before:]
        cluster.server.start()  # type: ignore[attr-defined]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not [line for line in outage if " psycopg.pool " in line], outage
    assert not [line for line in outage if line[:1].isspace()], outage  # one record, one line
    reports = [line for line in outage if "database connection failed" in line]
    assert 1 <= len(reports) <= 4, outage  # steps of 1, 2 s: three at most in 4 s


def test_worker_against_a_schema_with_pending_migrations_says_run_awa_migrate(
    tmp_path: Path, db: psycopg.Connection, dsn: str
) -> None:
    from awa_cli.db import migrations

    last = migrations.available()[-1]
    db.execute("DELETE FROM awa.schema_migrations WHERE version = %s", (last.version,))
    db.commit()
    done, _ = awa(tmp_path, dsn, "worker")
    line = one_line(done)
    assert done.returncode == 1
    assert line == (
        f"Error: awa schema in {db.info.dbname} is not up to date "
        f"({last.version:04d}_{last.name} pending): run awa migrate"
    )
