"""`awa doctor`: healthy on a migrated database with a running worker, and each failure
induced for real — an unmigrated database, an open transaction holding back vacuum, a stale
running job with no leader, dead tuples with autovacuum off, lost notifications, an
unreachable server. ``--json`` shape and exit codes (0 no failure, 1 a failure)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import awa_cli as awa
from awa_cli.cli import cli
from awa_cli.db.roundtrip import notifications_work, notify_round_trip
from awa_cli.doctor import Check, DoctorOptions, Status, diagnose, guarded, judge_round_trip
from tests.helpers import running_worker, wait_until

pytestmark = [pytest.mark.integration]
ENV = {"NO_COLOR": "1", "COLUMNS": "200"}
NAMES = [
    "database",
    "schema",
    "server",
    "synchronous_commit",
    "max_connections",
    "listen_notify",
    "leader",
    "limits",
    "claims",
    "dead_workers",
    "stuck_rescues",
    "oldest_available",
    "table_bloat",
    "long_transactions",
]

app = awa.App()


@app.task(dict, kind="noop")  # type: ignore[arg-type]
async def noop(job: awa.Job) -> None:
    pass


def doctor(config: Path, dsn: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["--config", str(config), "--database-url", dsn, "doctor", "--json", *args], env=ENV
    )
    return result.exit_code, json.loads(result.stdout)


def poll(predicate: Any, timeout: float) -> None:
    """Call ``predicate`` (which runs `awa doctor`) until true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.asyncio
async def test_healthy_with_a_running_worker(dsn: str, config_file: Path) -> None:
    async with running_worker(app, dsn, leader_election_interval=0.2):
        await wait_until(lambda: _leader_present(dsn))
        code, report = await asyncio.to_thread(doctor, config_file, dsn)
    checks = by_name(report)
    assert code == 0, report
    assert list(checks) == NAMES
    assert set(report["checks"][0]) == {"name", "status", "detail", "fix"}
    for name in ("database", "schema", "max_connections", "listen_notify", "leader"):
        assert checks[name]["status"] == "ok", checks[name]
        assert checks[name]["fix"] is None
    for name in ("stuck_rescues", "oldest_available", "table_bloat", "long_transactions"):
        assert checks[name]["status"] == "ok", checks[name]
    assert "awa-worker" in checks["leader"]["detail"]
    assert checks["listen_notify"]["detail"].startswith("round trip in")


async def _leader_present(dsn: str) -> bool:
    checks = await diagnose(dsn)
    return next(c for c in checks if c.name == "leader").status is Status.OK


def test_no_leader_is_a_warning_and_the_table_output(dsn: str, config_file: Path) -> None:
    code, report = doctor(config_file, dsn)
    leader = by_name(report)["leader"]
    assert code == 0
    assert leader["status"] == "warn" and "awa worker" in leader["fix"]
    result = CliRunner().invoke(
        cli, ["--config", str(config_file), "--database-url", dsn, "doctor"], env=ENV
    )
    assert result.exit_code == 0
    assert "leader" in result.stdout and "WARN" in result.stdout


def test_a_bad_threshold_is_a_usage_error(config_file: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["--config", str(config_file), "doctor", "--long-transaction-threshold", "soon"],
        env=ENV,
    )
    assert result.exit_code == 2
    assert "--long-transaction-threshold" in result.stderr and "Traceback" not in result.output


def test_unmigrated_database_fails(fresh_dsn: str, config_file: Path) -> None:
    code, report = doctor(config_file, fresh_dsn)
    checks = by_name(report)
    assert code == 1
    assert checks["schema"]["status"] == "fail"
    assert checks["schema"]["fix"] == "run `awa migrate`"
    assert "stuck_rescues" not in checks  # nothing to look at without awa.jobs
    assert checks["leader"]["status"] == "warn"  # no awa.workers to name it: still no error


def test_a_pending_migration_fails(dsn: str, config_file: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM awa.schema_migrations WHERE version = 1")
    code, report = doctor(config_file, dsn)
    assert code == 1
    assert "pending 0001" in by_name(report)["schema"]["detail"]


def test_unreachable_database_fails(config_file: Path, tmp_path: Path) -> None:
    url = f"postgresql://nobody:secret@/awa?host={tmp_path}&port=1"
    code, report = doctor(config_file, url)
    assert code == 1
    [check] = report["checks"]
    assert check["name"] == "database" and check["status"] == "fail"
    assert "secret" not in json.dumps(report)


def test_long_transaction_holding_back_vacuum_fails(dsn: str, config_file: Path) -> None:
    with psycopg.connect(dsn) as other:
        other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM awa.jobs")  # takes the snapshot: xmin is held

        def check() -> dict[str, Any]:
            code, report = doctor(config_file, dsn, "--long-transaction-threshold", "200ms")
            return {"code": code, **by_name(report)["long_transactions"]}

        poll(lambda: check()["status"] == "fail", timeout=10)
        found = check()
        assert found["code"] == 1
        assert "holding back vacuum" in found["detail"]
        assert f"end backend {other.info.backend_pid} with pg_terminate_backend" in found["fix"]
        other.rollback()
    _, report = doctor(config_file, dsn, "--long-transaction-threshold", "200ms")
    assert by_name(report)["long_transactions"]["status"] == "ok"


def test_stale_running_job_without_leader_fails(dsn: str, config_file: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"n": 1}, kind="noop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'running', attempt = 1, run_lease = 1, "
            "attempted_at = now() - interval '10 minutes', "
            "heartbeat_at = now() - interval '10 minutes' WHERE id = %s",
            (job.id,),
        )
    code, report = doctor(config_file, dsn)
    stuck = by_name(report)["stuck_rescues"]
    assert code == 1
    assert stuck["status"] == "fail"
    assert "1 stale heartbeats" in stuck["detail"] and "awa rescue run" in stuck["fix"]
    with psycopg.connect(dsn, autocommit=True) as conn:  # within 3 × staleness: not stuck yet
        conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '20 seconds'")
    assert by_name(doctor(config_file, dsn)[1])["stuck_rescues"]["status"] == "ok"


def test_old_available_job_warns_then_fails(dsn: str, config_file: Path) -> None:
    with awa.Client(dsn) as client:
        job = client.insert({"n": 1}, kind="noop", queue="slow")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET run_at = now() - interval '10 minutes'")
        code, report = doctor(config_file, dsn)
        oldest = by_name(report)["oldest_available"]
        assert (code, oldest["status"]) == (0, "warn")
        assert f"job {job.id} in queue 'slow'" in oldest["detail"]
        conn.execute("UPDATE awa.jobs SET run_at = now() - interval '2 hours'")
    code, report = doctor(config_file, dsn)
    assert (code, by_name(report)["oldest_available"]["status"]) == (1, "fail")


def test_dead_tuples_with_autovacuum_off_fail(dsn: str, config_file: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO awa.jobs (kind, args) SELECT 'noop', '{}' FROM generate_series(1, 12000)"
        )
        conn.execute("DELETE FROM awa.jobs")
        conn.execute("SELECT pg_stat_force_next_flush()")

    def bloat() -> dict[str, Any]:
        code, report = doctor(config_file, dsn)
        return {"code": code, **by_name(report)["table_bloat"]}

    poll(lambda: bloat()["status"] == "fail", timeout=15)
    found = bloat()
    assert found["code"] == 1
    assert "awa.jobs: 12000 dead / 0 live" in found["detail"]
    assert "autovacuum off" in found["detail"] and "VACUUM" in found["fix"]


@pytest.mark.asyncio
async def test_round_trip_measured_and_lost(
    dsn: str, fresh_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        elapsed = await notify_round_trip(conn)  # the same session sends and hears
        assert elapsed is not None and elapsed < 2.0
        # A notification only reaches listeners of the database it was sent in: a sender
        # in another database is a listener that hears nothing, as behind a
        # transaction-mode pooler, where LISTEN and NOTIFY end up in unrelated sessions.
        async with await psycopg.AsyncConnection.connect(fresh_dsn, autocommit=True) as other:
            assert await notify_round_trip(conn, sender=other, timeout=0.3) is None
            assert not await notifications_work(conn, poll_interval=1.5, sender=other, timeout=0.3)
        [warning] = [r for r in caplog.records if getattr(r, "action", "") == "notify_unavailable"]
        assert "falling back to polling every 1.5s" in warning.getMessage()
        # The connection is usable afterwards and listens to nothing left over.
        await conn.execute("SELECT 1")
        assert await notifications_work(conn, poll_interval=1.0) is True
    lost = judge_round_trip(None, 2.0)
    assert lost.status is Status.FAIL and "session-mode pooler" in (lost.fix or "")
    assert judge_round_trip(0.004, 2.0).status is Status.OK


@pytest.mark.asyncio
async def test_too_few_connections_for_the_configured_workers(dsn: str) -> None:
    checks = {c.name: c for c in await diagnose(dsn, DoctorOptions(processes=64, queues=4))}
    assert checks["max_connections"].status is Status.FAIL
    assert "needs up to 1344" in checks["max_connections"].detail


@pytest.mark.asyncio
async def test_a_check_whose_query_fails_is_a_failed_check(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SET statement_timeout = '50ms'")

        async def slow() -> Check:
            await conn.execute("SELECT pg_sleep(1)")  # cancelled by the server's timeout
            return Check("slow", Status.OK, "never")

        check = await guarded("slow", slow)
    assert check.status is Status.FAIL
    assert "statement timeout" in check.detail and check.fix
