"""`awa migrate` through click's CliRunner against real databases."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import Result

from tests.helpers import AwaRunner

from awa_cli.cli import cli
from awa_cli.db import migrations

BOGUS_URL = "postgresql://nobody@/nodb?host=/nonexistent-awa-socket&port=1"


def run(config: Path, *args: str) -> Result:
    return AwaRunner().invoke(cli, ["--config", str(config), *args])


@pytest.mark.integration
def test_migrate_applies_then_is_up_to_date(fresh_dsn: str, config_file: Path) -> None:
    names = [f"{m.version:04d}_{m.name}" for m in migrations.available()]

    pending = run(config_file, "--database-url", fresh_dsn, "migrate", "--status", "--json")
    assert pending.exit_code == 0, pending.output
    status = json.loads(pending.stdout)
    assert [(s["version"], s["name"], s["applied"], s["applied_at"]) for s in status] == [
        (m.version, m.name, False, None) for m in migrations.available()
    ]

    first = run(config_file, "--database-url", fresh_dsn, "migrate")
    assert first.exit_code == 0, first.output
    assert first.stdout == ""
    assert [f"applied {n}" for n in names] == [
        line for line in first.stderr.splitlines() if line.strip()
    ]
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT to_regclass('awa.jobs') IS NOT NULL").fetchone() == (True,)

    second = run(config_file, "--database-url", fresh_dsn, "migrate")
    assert second.exit_code == 0
    assert "up to date" in second.stderr

    as_json = run(config_file, "--database-url", fresh_dsn, "migrate", "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {"applied": []}
    assert json.loads(
        run(config_file, "--database-url", fresh_dsn, "--json", "migrate").stdout
    ) == {"applied": []}

    applied = run(config_file, "--database-url", fresh_dsn, "--json", "migrate", "--status")
    rows = json.loads(applied.stdout)
    assert [r["applied"] for r in rows] == [True] * len(names)
    assert all(r["applied_at"] for r in rows)

    plain = run(config_file, "--database-url", fresh_dsn, "migrate", "--status")
    assert plain.exit_code == 0
    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["version", "name", "applied_at"]
    assert lines[1].split()[:2] == ["0001", "initial"]
    assert lines[1].split()[2] != "pending"


@pytest.mark.integration
def test_migrate_json_on_a_fresh_database(fresh_dsn: str, config_file: Path) -> None:
    result = run(config_file, "--database-url", fresh_dsn, "migrate", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "applied": [f"{m.version:04d}_{m.name}" for m in migrations.available()]
    }


@pytest.mark.integration
def test_status_shows_pending_in_plain_text(fresh_dsn: str, config_file: Path) -> None:
    result = run(config_file, "--database-url", fresh_dsn, "migrate", "--status")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split() == ["0001", "initial", "pending"]


def test_migrate_sql_needs_no_database(config_file: Path) -> None:
    result = run(config_file, "--database-url", BOGUS_URL, "migrate", "--sql")
    assert result.exit_code == 0, result.output
    assert "-- 0001_initial.sql" in result.stdout
    assert "CREATE TABLE awa.jobs" in result.stdout
    for m in migrations.available():
        assert m.sql.strip() in result.stdout


def test_migrate_unreachable_database_exits_1(config_file: Path) -> None:
    result = run(config_file, "--database-url", BOGUS_URL, "migrate")
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: database error"), result.stderr
    assert "Traceback" not in result.output


def test_missing_explicit_config_exits_2(tmp_path: Path) -> None:
    result = run(tmp_path / "nope.toml", "migrate")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.toml" in lines[0]


@pytest.mark.integration
def test_ctrl_c_during_a_blocked_migration_says_what_was_rolled_back_and_exits_130(
    fresh_dsn: str, config_file: Path
) -> None:
    """A real `awa migrate`, blocked mid-DDL by another session's uncommitted CREATE TYPE of
    the same name, gets SIGINT: one line saying what was rolled back, exit 130, nothing
    half-applied, and a rerun applies cleanly (D13)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    first = migrations.available()[0]
    with psycopg.connect(fresh_dsn, autocommit=True) as setup:
        # the schema and the ledger exist, so the block hits migration 0001 itself
        setup.execute(
            "CREATE SCHEMA awa; CREATE TABLE awa.schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    blocker = psycopg.connect(fresh_dsn)
    blocker.execute("CREATE TYPE awa.job_state AS ENUM ('held')")  # uncommitted: holds a lock
    env = {k: v for k, v in os.environ.items() if k not in ("AWA_CONFIG",)}
    env.update(AWA_DATABASE_URL=fresh_dsn, NO_COLOR="1")
    awa = str(Path(sys.executable).parent / "awa")
    proc = subprocess.Popen(
        [awa, "--config", str(config_file), "migrate"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(fresh_dsn, autocommit=True) as watch:
            deadline = time.monotonic() + 30
            while not watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> %s",
                (blocker.info.backend_pid,),
            ).fetchone()[0]:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        blocker.rollback()
        blocker.close()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        f"interrupted: migration {first.version:04d} rolled back, nothing applied"
    ]
    assert out == ""
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.schema_migrations").fetchone()[0] == 0
        assert conn.execute("SELECT to_regclass('awa.jobs')").fetchone()[0] is None
    again = run(config_file, "--database-url", fresh_dsn, "migrate")
    assert again.exit_code == 0, again.output


def from_the_future(dsn: str) -> int:
    """Record a migration one version past the newest this awa ships; return that version."""
    newest = max(m.version for m in migrations.available())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.schema_migrations (version, name) VALUES (%s, 'from_the_future')",
            (newest + 1,),
        )
    return newest


@pytest.mark.integration
def test_migrate_refuses_a_schema_newer_than_the_code(dsn: str, config_file: Path) -> None:
    """Issue 27 D17: a database migrated by a newer awa fails `awa migrate` (exit 1) with one
    line naming both versions; `--status` still lists what this awa knows."""
    newest = from_the_future(dsn)
    result = run(config_file, "--database-url", dsn, "migrate")
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert f"version {newest + 1:04d}, newer than this awa knows ({newest:04d})" in line, line
    assert run(config_file, "--database-url", dsn, "migrate", "--status").exit_code == 0


@pytest.mark.integration
def test_a_worker_refuses_a_schema_newer_than_the_code(dsn: str, tmp_path: Path) -> None:
    """A real `awa worker` exits 1 before it starts, naming both versions."""
    import os

    from tests.helpers import ROOT, run_python

    newest = from_the_future(dsn)
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.outage"]\n')
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("AWA_CONFIG", None)
    done = run_python("-m", "awa_cli", "--config", str(config), "worker", env=env)
    assert done.returncode == 1, done.stderr
    assert f"version {newest + 1:04d}, newer than this awa knows ({newest:04d})" in done.stderr
    assert "worker" not in done.stderr.split("Error:")[0] or "started" not in done.stderr
