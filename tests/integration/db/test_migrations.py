"""Migrations (awa_cli.db.migrations) against real databases, the schema they make, and the
SQL files shipped inside the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import uuid
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest

from awa_cli.db import migrations
from awa_cli.db.migrations import migrate_dsn
from tests.helpers import JOB_STATES, ROOT, build_wheel, results_in_threads, run_captured


# architecture §2: the columns of awa.jobs and their types (format_type spelling).
JOB_COLUMNS = {
    "id": "bigint",
    "kind": "text",
    "queue": "text",
    "args": "jsonb",
    "state": "awa.job_state",
    "priority": "smallint",
    "attempt": "integer",
    "max_attempts": "integer",
    "run_at": "timestamp with time zone",
    "run_lease": "bigint",
    "heartbeat_at": "timestamp with time zone",
    "deadline_at": "timestamp with time zone",
    "deadline_duration": "double precision",
    "callback_id": "uuid",
    "callback_timeout_at": "timestamp with time zone",
    "errors": "jsonb",
    "metadata": "jsonb",
    "tags": "text[]",
    "unique_key": "bytea",
    "unique_states": "awa.job_state[]",
    "output": "jsonb",
    "ordering_key": "text",
    "created_at": "timestamp with time zone",
    "attempted_at": "timestamp with time zone",
    "finalized_at": "timestamp with time zone",
}


def _ledger(dsn: str) -> list[tuple[int, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT version, name FROM awa.schema_migrations ORDER BY version"
        ).fetchall()


def test_available_finds_the_packaged_migrations_in_order() -> None:
    found = migrations.available()
    assert found, "no migrations found in awa_cli.sql"
    assert found[0].version == 1 and found[0].name == "initial"
    assert [m.version for m in found] == sorted(m.version for m in found)
    assert len({m.version for m in found}) == len(found)
    assert "CREATE TABLE awa.jobs" in found[0].sql


@pytest.mark.integration
def test_migrate_a_fresh_database_then_nothing(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT to_regclass('awa.jobs')").fetchone() == (None,)
        before = migrations.status(conn)
    assert [(s.version, s.applied_at) for s in before] == [
        (m.version, None) for m in migrations.available()
    ]
    applied = migrate_dsn(fresh_dsn)
    assert [m.version for m in applied] == [m.version for m in migrations.available()]
    assert applied[0].version == 1
    assert _ledger(fresh_dsn)[0] == (1, "initial")
    assert len(_ledger(fresh_dsn)) == len(migrations.available())
    assert migrate_dsn(fresh_dsn) == []
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT to_regclass('awa.jobs') IS NOT NULL").fetchone() == (True,)
        after = migrations.status(conn)
        # the advisory lock was released
        assert conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        ).fetchone() == (0,)
    assert all(s.applied_at is not None for s in after)


@pytest.mark.integration
def test_concurrent_migrates_on_a_fresh_database(fresh_dsn: str) -> None:
    runners = 4
    barrier = threading.Barrier(runners)

    def run(_: int) -> Any:
        barrier.wait(timeout=10)
        return migrate_dsn(fresh_dsn)

    results = results_in_threads(runners, run, timeout=60)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert len(results) == runners
    applied = [m.version for r in results for m in r]
    assert sorted(applied) == [m.version for m in migrations.available()]  # each applied once
    assert _ledger(fresh_dsn)[0] == (1, "initial")
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'awa' AND c.relname = 'jobs'"
        ).fetchone() == (1,)
        assert conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'awa'"
        ).fetchone() == (1,)


@pytest.mark.integration
def test_concurrent_awa_migrate_processes(fresh_dsn: str) -> None:
    awa = Path(sys.executable).parent / "awa"
    if not awa.exists():
        found = shutil.which("awa")
        assert found, "the awa console script is not installed"
        awa = Path(found)
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("AWA_CONFIG", None)
    procs = [
        subprocess.Popen(
            [str(awa), "--config", os.devnull, "--database-url", fresh_dsn, "migrate", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    import json

    applied = sorted(name for out, _ in outputs for name in json.loads(out)["applied"])
    assert applied == [f"{m.version:04d}_{m.name}" for m in migrations.available()]
    assert _ledger(fresh_dsn)[0] == (1, "initial")


# -- the schema --------------------------------------------------------------------------------


@pytest.mark.integration
def test_jobs_columns(db: psycopg.Connection) -> None:
    rows = db.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = 'awa.jobs'::regclass AND a.attnum > 0 AND NOT a.attisdropped
        """
    ).fetchall()
    columns = dict(rows)
    missing = set(JOB_COLUMNS) - set(columns)
    assert not missing, f"awa.jobs lacks {sorted(missing)}"
    assert {name: columns[name] for name in JOB_COLUMNS} == JOB_COLUMNS
    identity = db.execute(
        "SELECT attidentity FROM pg_attribute WHERE attrelid = 'awa.jobs'::regclass AND attname = 'id'"
    ).fetchone()
    assert identity is not None and identity[0] in ("a", "d")


@pytest.mark.integration
def test_column_defaults_and_checks(db: psycopg.Connection) -> None:
    row = db.execute(
        "INSERT INTO awa.jobs (kind) VALUES ('k')"
        " RETURNING queue, state::text, priority, max_attempts, attempt, run_lease, errors, metadata, tags"
    ).fetchone()
    assert row == ("default", "available", 2, 25, 0, 0, [], {}, [])
    db.rollback()
    for column, value in [
        ("priority", 0),
        ("priority", 5),
        ("max_attempts", 0),
        ("max_attempts", 1001),
    ]:
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(f"INSERT INTO awa.jobs (kind, {column}) VALUES ('k', %s)", (value,))
        db.rollback()
    for kind in ("", "x" * 201):
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute("INSERT INTO awa.jobs (kind) VALUES (%s)", (kind,))
        db.rollback()
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            "INSERT INTO awa.jobs (kind, tags) VALUES ('k', %s)", ([str(i) for i in range(21)],)
        )
    db.rollback()


@pytest.mark.integration
def test_job_state_enum_in_order(db: psycopg.Connection) -> None:
    labels = db.execute(
        "SELECT e.enumlabel FROM pg_enum e WHERE e.enumtypid = 'awa.job_state'::regtype ORDER BY e.enumsortorder"
    ).fetchall()
    assert [label for (label,) in labels] == JOB_STATES


def _indexes(db: psycopg.Connection) -> dict[str, dict[str, Any]]:
    rows = db.execute(
        """
        SELECT c.relname, i.indisunique, pg_get_expr(i.indpred, i.indrelid),
               pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'awa.jobs'::regclass
        """
    ).fetchall()
    return {
        name: {"unique": unique, "predicate": pred, "def": definition}
        for name, unique, pred, definition in rows
    }


@pytest.mark.integration
def test_jobs_indexes(db: psycopg.Connection) -> None:
    idx = _indexes(db)

    claim = idx["jobs_claim_idx"]
    assert not claim["unique"] and claim["predicate"] is not None
    assert "(queue, priority, run_at, id)" in claim["def"]
    for state in ("available", "scheduled", "retryable"):
        assert state in claim["predicate"]
    for state in ("running", "completed", "failed", "cancelled", "waiting_external"):
        assert state not in claim["predicate"]

    unique = idx["jobs_unique_key_idx"]
    assert unique["unique"] and "(unique_key)" in unique["def"]
    assert "unique_key IS NOT NULL" in unique["predicate"]
    assert "unique_states" in unique["predicate"]

    callback = idx["jobs_callback_id_idx"]
    assert callback["unique"] and "(callback_id)" in callback["def"]

    heartbeat = idx["jobs_heartbeat_idx"]
    assert "(heartbeat_at)" in heartbeat["def"] and "running" in heartbeat["predicate"]
    deadline = idx["jobs_deadline_idx"]
    assert "(deadline_at)" in deadline["def"] and "running" in deadline["predicate"]
    timeout = idx["jobs_callback_timeout_idx"]
    assert "(callback_timeout_at)" in timeout["def"] and "waiting_external" in timeout["predicate"]


@pytest.mark.integration
def test_unique_index_holds_only_in_unique_states(db: psycopg.Connection) -> None:
    insert = (
        "INSERT INTO awa.jobs (kind, unique_key, unique_states, state)"
        " VALUES ('k', '\\x01', '{available}', %s::awa.job_state)"
    )
    db.execute(insert, ("available",))
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute(insert, ("available",))
    db.rollback()
    db.execute(insert, ("available",))
    db.execute(insert, ("completed",))  # not in its unique_states: does not hold the key
    db.execute(insert, ("failed",))
    db.commit()
    assert db.execute("SELECT count(*) FROM awa.jobs").fetchone() == (3,)


@pytest.mark.integration
def test_callback_ids_are_unique(db: psycopg.Connection) -> None:
    cid = uuid.uuid4()
    db.execute("INSERT INTO awa.jobs (kind, callback_id) VALUES ('k', %s)", (cid,))
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute("INSERT INTO awa.jobs (kind, callback_id) VALUES ('k', %s)", (cid,))
    db.rollback()


# architecture §9: awa.periodic_jobs (one row per schedule) and awa.periodic_fires (the dedup of
# (name, fire time)), from 0002_periodic.sql.
PERIODIC_COLUMNS = {
    "name": ("text", True),
    "definition": ("jsonb", True),
    "paused": ("boolean", True),
    "created_at": ("timestamp with time zone", True),
    "updated_at": ("timestamp with time zone", True),
    "active_since": ("timestamp with time zone", True),
    "last_fire_at": ("timestamp with time zone", False),
    "next_fire_at": ("timestamp with time zone", False),
    "last_job_id": ("bigint", False),
}
FIRES_COLUMNS = {
    "name": ("text", True),
    "fire_at": ("timestamp with time zone", True),
    "fired_at": ("timestamp with time zone", True),
}


def _columns(db: psycopg.Connection, table: str) -> dict[str, tuple[str, bool]]:
    rows = db.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
        FROM pg_attribute a
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        """,
        (table,),
    ).fetchall()
    return {name: (kind, not_null) for name, kind, not_null in rows}


def test_0002_is_periodic() -> None:
    assert [(m.version, m.name) for m in migrations.available()][:2] == [
        (1, "initial"),
        (2, "periodic"),
    ]


@pytest.mark.integration
def test_periodic_tables(db: psycopg.Connection) -> None:
    assert _columns(db, "awa.periodic_jobs") == PERIODIC_COLUMNS
    assert _columns(db, "awa.periodic_fires") == FIRES_COLUMNS
    keys = dict(
        db.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'p' AND conrelid IN ('awa.periodic_jobs'::regclass,"
            " 'awa.periodic_fires'::regclass)"
        ).fetchall()
    )
    assert keys == {
        "awa.periodic_jobs": "PRIMARY KEY (name)",
        "awa.periodic_fires": "PRIMARY KEY (name, fire_at)",
    }
    row = db.execute(
        "INSERT INTO awa.periodic_jobs (name, definition) VALUES ('n', '{}')"
        " RETURNING paused, created_at = now(), updated_at = now(), next_fire_at"
    ).fetchone()
    assert row == (False, True, True, None)
    for name, definition in (("bad name", "{}"), ("x" * 201, "{}"), ("ok", "[]")):
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(
                "INSERT INTO awa.periodic_jobs (name, definition) VALUES (%s, %s::jsonb)",
                (name, definition),
            )
        db.rollback()
    # A fire row needs its schedule, and goes with it.
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        db.execute("INSERT INTO awa.periodic_fires (name, fire_at) VALUES ('none', now())")
    db.rollback()
    db.execute("INSERT INTO awa.periodic_jobs (name, definition) VALUES ('n', '{}')")
    db.execute("INSERT INTO awa.periodic_fires (name, fire_at) VALUES ('n', '2026-05-05 12:00Z')")
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute(
            "INSERT INTO awa.periodic_fires (name, fire_at) VALUES ('n', '2026-05-05 12:00Z')"
        )
    db.rollback()
    index = db.execute(
        "SELECT pg_get_indexdef(i.indexrelid), pg_get_expr(i.indpred, i.indrelid)"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = 'periodic_jobs_next_fire_idx'"
    ).fetchone()
    assert index is not None
    assert "(next_fire_at)" in index[0] and index[1] == "(NOT paused)"


# -- packaging -------------------------------------------------------------------------------


def test_sql_is_found_through_importlib_resources() -> None:
    entry = resources.files("awa_cli.sql").joinpath("0001_initial.sql")
    assert entry.is_file()
    assert "CREATE TYPE awa.job_state" in entry.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_ships_the_migrations(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "awa_cli/sql/0001_initial.sql" in names
        assert "awa_cli/sql/__init__.py" in names
        packaged = zf.read("awa_cli/sql/0001_initial.sql").decode()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "awa = awa_cli.cli:main" in zf.read(entry_points).decode()
    assert packaged == (ROOT / "sql" / "0001_initial.sql").read_text(encoding="utf-8")
    for m in migrations.available():
        assert f"awa_cli/sql/{m.version:04d}_{m.name}.sql" in names


def test_installed_wheel_finds_its_migrations(wheel: Path, tmp_path: Path) -> None:
    """Unpack the wheel as an install would and import awa_cli from it, not from the checkout."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    code = (
        "import awa_cli, json; from importlib import resources;"
        "from awa_cli.db import migrations;"
        "f = resources.files('awa_cli.sql').joinpath('0001_initial.sql');"
        "print(json.dumps({'file': awa_cli.__file__, 'found': f.is_file(),"
        " 'versions': [m.version for m in migrations.available()]}))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = run_captured([sys.executable, "-c", code], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    result = json.loads(proc.stdout)
    assert result["file"].startswith(str(site))
    assert result["found"] is True
    assert result["versions"][0] == 1


# -- 0003: queues, dead letters, the audit log -----------------------------------------------


def _column_types(db: psycopg.Connection, table: str) -> dict[str, str]:
    rows = db.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (table,),
    ).fetchall()
    return dict(rows)


def test_queues_migration_is_packaged() -> None:
    found = {m.version: m.name for m in migrations.available()}
    assert found.get(3) == "queues_dead_letters"


@pytest.mark.integration
def test_dead_letters_have_every_job_column(db: psycopg.Connection) -> None:
    # The move statements copy columns by name: a column added to awa.jobs by a later
    # migration must be added to awa.dead_letters too, with the same type.
    jobs = _column_types(db, "awa.jobs")
    dead = _column_types(db, "awa.dead_letters")
    missing = {name: kind for name, kind in jobs.items() if dead.get(name) != kind}
    assert not missing, f"awa.dead_letters lacks (or has another type for) {missing}"
    extra = set(dead) - set(jobs)
    assert extra == {"dead_at", "dead_reason"}
    assert dead["dead_at"] == "timestamp with time zone" and dead["dead_reason"] == "text"
    primary = db.execute(
        "SELECT a.attname FROM pg_index i"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)"
        " WHERE i.indrelid = 'awa.dead_letters'::regclass AND i.indisprimary"
    ).fetchall()
    assert primary == [("id",)]
    # no identity: a dead letter keeps its job's id
    identity = db.execute(
        "SELECT attidentity FROM pg_attribute"
        " WHERE attrelid = 'awa.dead_letters'::regclass AND attname = 'id'"
    ).fetchone()
    assert identity == ("",)


@pytest.mark.integration
def test_dead_letters_have_no_unique_index_but_the_id(db: psycopg.Connection) -> None:
    # Decision: a job that moves to the DLQ releases its unique key.
    unique = db.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'awa.dead_letters'::regclass AND i.indisunique"
    ).fetchall()
    assert unique == [("dead_letters_pkey",)]
    indexes = {
        name: definition
        for name, definition in db.execute(
            "SELECT indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = 'awa' AND tablename = 'dead_letters'"
        ).fetchall()
    }
    assert "(queue, dead_at DESC, id DESC)" in indexes["dead_letters_queue_idx"]
    assert "(kind, dead_at DESC, id DESC)" in indexes["dead_letters_kind_idx"]
    assert "(dead_at, id)" in indexes["dead_letters_dead_at_idx"]


@pytest.mark.integration
def test_dead_reason_is_checked(db: psycopg.Connection) -> None:
    insert = (
        "INSERT INTO awa.dead_letters (id, kind, queue, args, state, priority, attempt,"
        " max_attempts, run_at, run_lease, callback_in_handler, errors, metadata, tags,"
        " created_at, dead_reason)"
        " VALUES (%s, 'k', 'q', '{}', 'failed', 2, 1, 1, now(), 1, false, '[]', '{}', '{}',"
        " now(), %s) RETURNING dead_at IS NOT NULL"
    )
    for number, reason in enumerate(
        ["exhausted", "terminal_error", "rescued", "callback_failed", "manual"], start=1
    ):
        assert db.execute(insert, (number, reason)).fetchone() == (True,)
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(insert, (99, "bored"))
    db.rollback()


@pytest.mark.integration
def test_queues_and_audit_log_tables(db: psycopg.Connection) -> None:
    assert _column_types(db, "awa.queues") == {
        "name": "text",
        "paused": "boolean",
        "paused_at": "timestamp with time zone",
        "paused_by": "text",
        "dead_letter": "boolean",
        "updated_at": "timestamp with time zone",
    }
    row = db.execute(
        "INSERT INTO awa.queues (name) VALUES ('q')"
        " RETURNING paused, paused_at, dead_letter, updated_at IS NOT NULL"
    ).fetchone()
    assert row == (False, None, False, True)
    assert _column_types(db, "awa.audit_log") == {
        "id": "bigint",
        "at": "timestamp with time zone",
        "actor": "text",
        "action": "text",
        "target": "text",
        "result": "text",
        "detail": "jsonb",
    }
    entry = db.execute(
        "INSERT INTO awa.audit_log (actor, action, result) VALUES ('cli:me', 'queue.pause', 'ok')"
        " RETURNING id, at IS NOT NULL, detail"
    ).fetchone()
    assert entry is not None and entry[1:] == (True, {})
    indexes = db.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'awa' AND indexname = 'audit_log_at_idx'"
    ).fetchall()
    assert len(indexes) == 1 and "(at)" in indexes[0][0]
    db.rollback()
