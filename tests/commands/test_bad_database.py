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

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
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
    for argv in (["job", "list"], ["worker"]):
        done, _ = awa(tmp_path, url, *argv)
        line = one_line(done)
        assert done.returncode == 2
        assert line.startswith("Error: invalid database URL: expected postgresql://")
        assert "pw" not in line
