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
