"""The embedded PostgreSQL (awa_cli.db.embedded) and `awa db`, against real servers.

One server (pgserver's bundled binaries when installed, as users get it) is shared by the
module; the concurrency, stop and CLI tests use data directories of their own.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from awa_cli.db.embedded import EmbeddedPostgres, find_pg_bin
from tests.helpers import AwaRunner

pytestmark = pytest.mark.integration

_START_SNIPPET = """
import sys
from awa_cli.db.embedded import EmbeddedPostgres
server = EmbeddedPostgres(sys.argv[1])
dsn = server.start()
print(dsn)
print(server.status().pid)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    srv = EmbeddedPostgres(tmp_path_factory.mktemp("embedded") / "pgdata")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def _ready_count(srv: EmbeddedPostgres) -> int:
    return srv.log_path.read_text(errors="replace").count("ready to accept connections")


def test_find_pg_bin_has_the_tools() -> None:
    for prefer_system in (False, True):
        bin_dir = find_pg_bin(prefer_system=prefer_system)
        for tool in ("pg_ctl", "initdb", "postgres"):
            assert os.access(bin_dir / tool, os.X_OK)


def test_start_then_connect(server: EmbeddedPostgres) -> None:
    dsn = server.start()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.execute("SELECT current_database(), current_user").fetchone() == (
            "awa",
            "postgres",
        )
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)


def test_start_twice_is_one_server(server: EmbeddedPostgres) -> None:
    first_pid = server.status().pid
    dsn1 = server.start()
    dsn2 = EmbeddedPostgres(server.data_dir).start()  # another handle on the same dir
    assert dsn1 == dsn2 == server.dsn()
    assert server.status().pid == first_pid
    assert _ready_count(server) == 1


def test_status_of_running_server(server: EmbeddedPostgres) -> None:
    state = server.status()
    assert state.running and state.pid is not None
    assert state.data_dir == server.data_dir
    assert state.dsn == server.dsn()
    assert (state.socket_dir / ".s.PGSQL.5432").is_socket()


def test_data_dir_is_private(server: EmbeddedPostgres) -> None:
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700


def test_no_tcp_listener(server: EmbeddedPostgres) -> None:
    with psycopg.connect(server.dsn()) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
    pid = server.status().pid
    assert pid is not None
    lines = (server.data_dir / "postmaster.pid").read_text().splitlines()
    assert lines[5].strip() == ""  # the listen-address line of postmaster.pid


@pytest.mark.skipif(os.geteuid() != 0, reason="only meaningful when run as root")
def test_runs_as_unprivileged_user_under_root(server: EmbeddedPostgres) -> None:
    pid = server.status().pid
    assert pid is not None
    uid = _uid_of(pid)
    assert uid != 0
    assert pwd.getpwuid(uid).pw_name in ("awa", "nobody")
    assert server.data_dir.stat().st_uid == uid
    assert server.socket_dir.stat().st_uid == uid


def test_long_data_dir_uses_a_short_socket_dir(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["d" * 40] * 3)) / "pgdata"
    srv = EmbeddedPostgres(deep)
    assert srv.socket_dir != deep
    assert len(os.fsencode(srv.socket_dir / ".s.PGSQL.5432")) < 107
    assert srv.socket_dir == EmbeddedPostgres(deep).socket_dir  # stable per data dir
    assert not srv.status().running


def test_concurrent_processes_share_one_server_that_outlives_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _START_SNIPPET, str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(out.split())
    assert len({tuple(o) for o in outputs}) == 1  # same DSN, same pid
    srv = EmbeddedPostgres(data_dir)
    try:
        state = srv.status()  # the starting processes have exited; the server has not
        assert state.running and str(state.pid) == outputs[0][1]
        assert _ready_count(srv) == 1
        with psycopg.connect(outputs[0][0]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        assert srv.stop() is True
    assert srv.stop() is False
    state = srv.status()
    assert not state.running and state.pid is None and state.dsn is None
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(srv.dsn(), connect_timeout=2).close()


def test_cli_db_commands(tmp_path: Path) -> None:
    from awa_cli.cli import cli

    data_dir = tmp_path / "pgdata"
    config = tmp_path / "awa.toml"
    config.write_text(f'[database]\nembedded_dir = "{data_dir}"\n', encoding="utf-8")
    runner = AwaRunner()

    def awa(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(cli, ["--config", str(config), *args])
        return result.exit_code, result.stdout, result.stderr

    code, out, err = awa("db", "status")
    assert code == 0, err
    assert "stopped" in out and str(data_dir) in out

    code, url, err = awa("db", "url")
    assert code == 0, err
    url = url.strip()
    assert url == EmbeddedPostgres(data_dir).dsn()

    try:
        code, out, err = awa("db", "start")
        assert code == 0, err
        assert out.strip() == url
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)

        code, out, err = awa("db", "start")  # idempotent
        assert code == 0 and out.strip() == url and "already running" in err

        code, out, err = awa("db", "status", "--json")
        assert code == 0, err
        state = json.loads(out)
        assert state["running"] is True and state["data_dir"] == str(data_dir)
        assert isinstance(state["pid"], int) and state["dsn"] == url

        code, out, err = awa("--json", "db", "status")
        assert code == 0 and json.loads(out)["running"] is True
    finally:
        code, out, err = awa("db", "stop")
    assert code == 0, err
    assert "stopped" in err

    code, out, err = awa("db", "stop")
    assert code == 0 and "not running" in err

    code, out, err = awa("db", "status", "--json")
    assert code == 0 and json.loads(out)["running"] is False
