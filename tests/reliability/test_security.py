"""Security: SQL fragments are data, passwords never leak, the embedded server is private,
callback ids are unguessable, and a worker runs with the least-privilege role the README
documents ("A least-privilege database role")."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from tests.helpers import AwaRunner, awa_on, login_role, readme_grants

import awa_cli as awa
from awa_cli.cli import cli
from awa_cli.db.embedded import EmbeddedPostgres
from tests.helpers import job_row, running_worker, scalar, states, wait_until
from tests.reliability.harness import AWA_BIN, ROOT, Fleet, env_for

pytestmark = [pytest.mark.integration]
NASTY = [
    "'; DROP TABLE awa.jobs; --",
    "$$; DROP TABLE awa.jobs; $$",
    "\\'; SELECT pg_sleep(10); --",
    "\"quoted\" 'single' `back`",
    "%s %(x)s {} {0}",
    "back\\slash\\\\",
    "Robert'); DELETE FROM awa.jobs WHERE ('1'='1",
]
PASSWORD = "Pw-s3cr3t-XYZZY-42"


def table_exists(dsn: str) -> bool:
    return bool(scalar(dsn, "SELECT to_regclass('awa.jobs') IS NOT NULL"))


# --------------------------------------------------------------------------- SQL fragments


@dataclass
class Echo:
    text: str


def test_sql_fragments_are_stored_verbatim_and_never_executed(dsn: str, tmp_path: Path) -> None:
    app = awa.App()
    queue = "q " + NASTY[0]
    seen: list[str] = []

    @app.task(Echo, kind="echo " + NASTY[1], queue=queue)
    async def echo(job: awa.Job) -> None:
        seen.append(job.args.text)
        job.set_output({"out": job.args.text})

    rows = []
    with awa.Client(dsn) as client:
        for text in NASTY:
            rows.append(
                client.insert(
                    Echo(text),
                    kind="echo " + NASTY[1],
                    queue=queue,
                    tags=NASTY,
                    metadata={text: text, "list": NASTY},
                    ordering_key=text[:200],
                )
            )
        for text in NASTY:
            row = client.insert({text: NASTY}, kind=text, queue=text)
            back = client.get_job(row.id)
            assert (back.kind, back.queue, back.args) == (text, text, {text: NASTY})
            assert [r.id for r in client.list_jobs(kind=text)] == [row.id]
    for row in rows:
        back = job_row(dsn, row.id)
        assert back.tags == NASTY and back.metadata == {
            back.args["text"]: back.args["text"],
            "list": NASTY,
        }

    async def work() -> None:  # a worker LISTENs on and claims from the nasty queue
        async with running_worker(app, dsn, {queue: 5}):
            await wait_until(lambda: len(seen) == len(NASTY))

    asyncio.run(work())
    assert sorted(seen) == sorted(NASTY)
    assert all(job_row(dsn, r.id).output == {"out": job_row(dsn, r.id).args["text"]} for r in rows)

    # the CLI stores them verbatim too
    config = tmp_path / "awa.toml"
    config.write_text("")
    for text in NASTY:
        enqueue = ["job", "enqueue", text, "--queue", text, "--args", json.dumps({"t": text})]
        result = awa_on(dsn, config, *enqueue, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (
            job_row(dsn, data["id"]).args == {"t": text} and data["kind"] == data["queue"] == text
        )
    assert table_exists(dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 3 * len(NASTY)


def test_sql_fragments_in_callback_payloads_and_errors(dsn: str) -> None:
    app = awa.App()

    @app.task(Echo)
    async def echo(job: awa.Job) -> awa.JobResult:
        return awa.WaitForCallback(await job.register_callback(timeout=600))

    async def run() -> list[awa.JobRow]:
        async with running_worker(app, dsn):
            async with awa.AsyncClient(dsn) as client:
                jobs = [await client.insert(Echo(t)) for t in NASTY]
            await wait_until(
                lambda: all(job_row(dsn, j.id).state == "waiting_external" for j in jobs)
            )
        return [job_row(dsn, j.id) for j in jobs]

    parked = asyncio.run(run())
    with awa.Client(dsn) as client:
        for i, row in enumerate(parked):
            if i % 2:
                done = client.complete_external(row.callback_id, {"p": NASTY[i], NASTY[i]: 1})
                assert done.callback_result == {"p": NASTY[i], NASTY[i]: 1}
            else:
                done = client.fail_external(row.callback_id, NASTY[i])
                assert done.errors[-1]["error"] == NASTY[i]
    assert table_exists(dsn)


# --------------------------------------------------------------------------- passwords


@pytest.fixture
def password_role(dsn: str) -> Iterator[tuple[str, str]]:
    """A role with a password (trust auth on the test cluster: it is sent, not needed)."""
    with login_role(dsn, "awa_pw", PASSWORD, attributes="SUPERUSER") as role:
        yield role


def no_password(*texts: str) -> None:
    for text in texts:
        for line in text.splitlines():
            assert PASSWORD not in line and quote(PASSWORD) not in line, line


def test_passwords_never_appear_in_output_logs_or_errors(
    password_role: tuple[str, str], tmp_path: Path
) -> None:
    _name, url = password_role
    config = tmp_path / "awa.toml"
    config.write_text(f'[database]\nurl = "{url}"\n[app]\nmodules = ["tests.apps.callbacks"]\n')
    outputs: list[str] = []

    def run(*argv: str, code: int = 0, **kwargs: str) -> dict[str, object] | list[object] | None:
        result = AwaRunner().invoke(cli, ["--config", str(config), *argv], env=kwargs)
        outputs.extend([result.stdout, result.stderr])
        assert result.exit_code == code, (argv, result.output)
        return json.loads(result.stdout) if "--json" in argv and code == 0 else None

    data = run("config", "check", "--json")
    assert isinstance(data, dict) and data["database"]["url"] and "***" in data["database"]["url"]
    run("config", "check")
    run("--database-url", url, "config", "check", "--json")
    run("config", "check", AWA_DATABASE_URL=url)
    job = run("job", "enqueue", "park", "--args", '{"order_id": 1}', "--json")
    run("-v", "job", "list", "--json")
    run("job", "show", str(job["id"]))  # type: ignore[index]
    run("queue", "stats", "--json")
    run("callback", "complete", str(uuid.uuid4()), code=4)
    bogus = f"postgresql://someone:{quote(PASSWORD)}@127.0.0.1:1/nowhere?connect_timeout=2"
    run("--database-url", bogus, "job", "list", code=1)
    run(
        "--database-url",
        bogus.replace("postgresql://someone:", "postgresql://someone:x") + "&sslmode=disable",
        "migrate",
        code=1,
    )
    run(
        "--database-url",
        f"host=127.0.0.1 port=1 user=x password={PASSWORD} connect_timeout=2",
        "job",
        "list",
        code=1,
    )
    # a real supervised worker: logs, and the children's command lines
    fleet = Fleet(tmp_path, url, processes=2)
    try:
        fleet.wait_ready()
        cmdlines = [
            Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            for pid in [fleet.proc.pid, *fleet.children().values()]
        ]
        assert fleet.stop() == 0
    finally:
        fleet.kill()
    outputs += [fleet.log(), *cmdlines]
    no_password(*outputs)
    assert any("***" in o for o in outputs)  # redacted, not missing


# --------------------------------------------------------------------------- the embedded server


def listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A":  # LISTEN
                inodes.add(parts[9])
    return inodes


def test_embedded_server_has_no_tcp_listener_and_a_private_data_dir(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "data", prefer_system=True, fast_init=True)
    dsn = server.start()
    try:
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""
            assert conn.execute("SELECT inet_server_addr()").fetchone()[0] is None  # a unix socket
        pid = server.status().pid
        assert pid is not None
        sockets = {
            os.readlink(f"/proc/{pid}/fd/{fd}")[len("socket:[") : -1]
            for fd in os.listdir(f"/proc/{pid}/fd")
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
        }
        assert sockets and not (sockets & listening_inodes())
        assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(server.socket_dir.stat().st_mode) == 0o700
    finally:
        server.stop()


# --------------------------------------------------------------------------- callback ids


def test_callback_ids_are_uuid4_from_os_urandom(dsn: str) -> None:
    from awa_cli.worker import callbacks

    source = inspect.getsource(callbacks)
    assert "uuid.uuid4()" in source and "import random" not in source
    assert "os.urandom" in inspect.getsource(uuid.uuid4)
    app = awa.App()

    @app.task(Echo)
    async def echo(job: awa.Job) -> awa.JobResult:
        await job.register_callback(timeout=600)  # replaced by the next one ...
        return awa.WaitForCallback(await job.register_callback(timeout=600))

    async def run() -> None:
        with awa.Client(dsn) as client:
            client.insert_many([Echo(str(i)) for i in range(200)])
        async with running_worker(app, dsn, {"default": 20}):
            await wait_until(lambda: waiting() == 200, timeout=60)

    def waiting() -> int:
        with psycopg.connect(dsn) as conn:
            return conn.execute(
                "SELECT count(*) FROM awa.jobs WHERE state = 'waiting_external'"
            ).fetchone()[0]

    asyncio.run(run())
    with psycopg.connect(dsn) as conn:
        ids = [r[0] for r in conn.execute("SELECT callback_id FROM awa.jobs").fetchall()]
    assert len(ids) == len(set(ids)) == 200
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
    # 122 random bits: no two share a long prefix (a counter or timestamp would)
    assert len({i.hex[:12] for i in ids}) == 200


# --------------------------------------------------------------------------- least privilege

GRANTS = readme_grants()  # exactly the README's least-privilege block


@pytest.fixture
def worker_role(dsn: str) -> Iterator[str]:
    """The README's least-privilege worker role: a non-superuser with a password and only
    the documented grants; the schema belongs to the migrating role."""
    attributes = "NOSUPERUSER NOCREATEDB NOCREATEROLE"
    with login_role(dsn, "awa_worker", PASSWORD, GRANTS, attributes) as (_, url):
        yield url


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE awa.jobs",
        "ALTER TABLE awa.jobs ADD COLUMN evil int",
        "TRUNCATE awa.jobs",
        "CREATE TABLE awa.evil (x int)",
        "DROP FUNCTION awa.channel_for(text)",
        "ALTER ROLE CURRENT_USER SUPERUSER",
        "SELECT * FROM awa.schema_migrations",
    ],
)
def test_the_worker_role_cannot_change_the_schema(worker_role: str, statement: str) -> None:
    with psycopg.connect(worker_role, autocommit=True) as conn:
        assert not conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


@dataclass
class Step:
    n: int


@dataclass
class After:
    trigger_id: int


def test_a_worker_enqueue_and_callback_run_with_only_the_documented_grants(
    worker_role: str, dsn: str, tmp_path: Path
) -> None:
    from tests.apps.callbacks import app as park_app

    app = awa.App()
    app.task(Step)(lambda job: None)
    app.task(After)(lambda job: None)
    app.on_completed_enqueue(Step, After, lambda args, job: After(job.id))
    for kind, task in park_app.tasks.items():  # the CLI's app parks jobs of kind 'park'
        app.task(task.args_type, kind=kind)(task.fn)
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.callbacks"]\n')

    def awa_cli(*argv: str) -> dict[str, object]:
        result = subprocess.run(
            [AWA_BIN, "--config", str(config), *argv, "--json"],
            env=env_for(worker_role),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        no_password(result.stdout, result.stderr)
        return json.loads(result.stdout)

    async def run() -> None:
        async with running_worker(
            app,
            worker_role,
            heartbeat_interval=0.2,
            rescue_interval=0.2,
            leader_election_interval=0.2,
            # Long enough that no poll below can race the prune; retention is exercised at
            # the end by back-dating the completed rows instead.
            completed_retention=3600,
        ) as worker:
            parked = await asyncio.to_thread(
                awa_cli, "job", "enqueue", "park", "--args", '{"order_id": 1}'
            )
            with awa.Client(worker_role, app=app) as client:
                ok = client.insert(Step(1))
                client.insert_many([Step(i) for i in range(2, 12)])
            await wait_until(lambda: job_row(dsn, int(parked["id"])).state == "waiting_external")
            callback_id = str(job_row(dsn, int(parked["id"])).callback_id)
            done = await asyncio.to_thread(awa_cli, "callback", "complete", callback_id)
            assert done["state"] == "completed"
            await wait_until(lambda: job_row(dsn, ok.id).state == "completed")
            # a stale job is rescued by this worker's maintenance, as the same role
            with psycopg.connect(dsn, autocommit=True) as conn:
                stale = conn.execute(
                    "INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, heartbeat_at) "
                    "VALUES ('step', 'default', '{\"n\": 99}', 'running', 1, 1, now() - interval '1 hour') "
                    "RETURNING id"
                ).fetchone()[0]
            await wait_until(lambda: job_row(dsn, stale).errors != [], timeout=20)
            assert job_row(dsn, stale).errors[0]["error"] == "heartbeat stale: worker presumed dead"
            # and retention prunes completed jobs (DELETE), as the same role
            await wait_until(lambda: states(dsn).get("completed", 0) >= 1 + 11 + 11)
            with psycopg.connect(dsn, autocommit=True) as conn:
                aged = conn.execute(
                    "UPDATE awa.jobs SET finalized_at = now() - interval '2 hours' "
                    "WHERE state = 'completed' RETURNING id"
                ).fetchall()
            assert len(aged) >= 1 + 11 + 11  # the parked job, the triggers, their follow-ups
            aged_ids = [row[0] for row in aged]

            def pruned() -> bool:
                with psycopg.connect(dsn) as conn:
                    query = "SELECT count(*) FROM awa.jobs WHERE id = ANY(%s)"
                    return conn.execute(query, (aged_ids,)).fetchone()[0] == 0

            await wait_until(pruned, timeout=20)

    asyncio.run(run())
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0]
    assert (
        left < 1 + 11 + 11 + 1
    )  # retention deleted completed jobs (triggers, follow-ups, parked, rescued)


def test_awa_worker_starts_with_only_the_documented_grants(
    worker_role: str, tmp_path: Path
) -> None:
    """The start-up check of `awa worker` needs no grant beyond the README's (the role cannot
    read awa.schema_migrations): the real process gets to 'started' and drains on SIGTERM."""
    import signal
    import time

    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["tests.apps.callbacks"]\n')
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [AWA_BIN, "--config", str(config), "worker"],
            env=env_for(worker_role),
            cwd=ROOT,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        while " started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()
    no_password(log.read_text())
