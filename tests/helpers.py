"""Helpers shared by the tests: running a real worker in the test's loop, waiting on conditions."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import quote

import psycopg
from psycopg import sql
from click.testing import CliRunner, Result

import awa_cli as awa

TESTS = Path(__file__).resolve().parent  # the tests/ folder
ROOT = TESTS.parent  # the repository

# awa.job_state's labels in enum order, which JobState follows.
JOB_STATES = [
    "scheduled",
    "available",
    "running",
    "waiting_external",
    "retryable",
    "completed",
    "failed",
    "cancelled",
    "blocked",  # 0008: waiting for parents (architecture §16); ALTER TYPE ... ADD VALUE appends
]


@contextlib.asynccontextmanager
async def running_worker(
    app: awa.App, dsn: str, queues: Any = None, **timings: Any
) -> AsyncIterator[awa.Worker]:
    """A real Worker running in this event loop; shut down (gracefully) on exit."""
    timings.setdefault("poll_interval", 0.2)
    worker = awa.Worker(app, dsn, queues or {"default": 10}, **timings)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.wait_listening(), timeout=10)
        yield worker
    finally:
        await worker.shutdown(timeout=timings.get("shutdown_timeout", 5))
        await asyncio.wait_for(task, timeout=10)


async def wait_until(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 15.0, interval: float = 0.02
) -> None:
    """Poll ``predicate`` until true; fail after a generous liveness bound."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def states(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(
            conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
        )


def memory_row(now: datetime, **fields: Any) -> awa.JobRow:
    """A JobRow built in memory, for the tests that need no database: job 7 ("send_email" on
    "email") running its first of 25 attempts since ``now``, every optional column empty;
    ``fields`` set the columns a test is about (``state`` may be a string)."""
    values: dict[str, Any] = dict.fromkeys(f.name for f in dataclasses.fields(awa.JobRow))
    values.update(
        id=7,
        kind="send_email",
        queue="email",
        args={"to": "a@example.com"},
        state=awa.JobState.RUNNING,
        priority=2,
        attempt=1,
        max_attempts=25,
        run_at=now,
        run_lease=1,
        errors=[],
        metadata={},
        tags=[],
        created_at=now,
    )
    values.update(fields)
    values["state"] = awa.JobState(values["state"])
    return awa.JobRow(**values)


def job_row(dsn: str, job_id: int) -> awa.JobRow:
    from psycopg.rows import dict_row

    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM awa.jobs WHERE id = %s", (job_id,))
        record = cur.fetchone()
        assert record is not None
        return awa.JobRow.from_record(record)


def audit_rows(dsn: str) -> list[tuple[Any, ...]]:
    """The audit log, oldest first: (actor, action, target, result, detail) a row."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT actor, action, target, result, detail FROM awa.audit_log ORDER BY id"
        ).fetchall()


async def all_terminal(dsn: str, count: int | None = None) -> bool:
    counts = await asyncio.to_thread(states, dsn)
    terminal = sum(counts.get(s, 0) for s in ("completed", "failed", "cancelled"))
    total = sum(counts.values())
    return terminal == total and (count is None or total == count)


CLI_ENV = {"NO_COLOR": "1", "COLUMNS": "200"}


class AwaRunner(CliRunner):
    """click's CliRunner with the suite's terminal: ``NO_COLOR=1``, 200 columns, and
    ``catch_exceptions=False`` by default, so an unexpected exception fails the test instead of
    passing for the documented exit code 1."""

    def __init__(self) -> None:
        super().__init__(env=dict(CLI_ENV))

    def invoke(  # type: ignore[override]
        self,
        cli: Any,
        args: str | Sequence[str] | None = None,
        input: str | bytes | None = None,
        env: Mapping[str, str | None] | None = None,
        catch_exceptions: bool = False,
        color: bool = False,
        **extra: Any,
    ) -> Result:
        return super().invoke(cli, args, input, env, catch_exceptions, color, **extra)

    def awa(self, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
        """``awa ARGS...`` in-process."""
        from awa_cli.cli import cli

        return self.invoke(cli, list(args), env=env)


def readme_grants() -> list[str]:
    """The GRANT statements of the README's "A least-privilege database role" block, with
    ``{db}`` and ``{role}`` where the README says ``app`` and ``awa_worker``: the tests that run
    a least-privilege worker use exactly what the README documents."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A least-privilege database role", 1)[1]
    block = section.split("```sql", 1)[1].split("```", 1)[0]
    grants = []
    for line in block.splitlines():
        statement = line.split("--", 1)[0].strip()
        if statement.startswith("GRANT"):
            statement = re.sub(r"\bON DATABASE app\b", "ON DATABASE {db}", statement)
            grants.append(re.sub(r"\bTO awa_worker;", "TO {role};", statement))
    assert grants, "README: no GRANT in the least-privilege block"
    return grants


def run_sql(dsn: str, statement: str, **names: str) -> None:
    """Run ``statement`` with ``{name}`` placeholders filled by the identifiers ``names``, as the
    suite's superuser, in autocommit (even in a read-only window)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        idents = {k: sql.Identifier(v) for k, v in names.items()}
        conn.execute(sql.SQL(statement).format(**idents))


@contextlib.contextmanager
def login_role(
    dsn: str, prefix: str, password: str, grants: Sequence[str] = (), attributes: str = ""
) -> Iterator[tuple[str, str]]:
    """A LOGIN role ``PREFIX_<random>`` with ``password``, the role ``attributes`` (such as
    ``SUPERUSER``) and exactly ``grants`` (statements with ``{db}`` and ``{role}``); yields
    its name and URL, and drops it with what it owns at the end."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    create = sql.SQL(f"CREATE ROLE {{}} LOGIN {attributes} PASSWORD {{}}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(create.format(sql.Identifier(name), sql.Literal(password)))
        db = sql.Identifier(conn.info.dbname)
        for statement in grants:
            conn.execute(sql.SQL(statement).format(db=db, role=sql.Identifier(name)))
        where = f"{conn.info.dbname}?host={quote(conn.info.host, safe='/')}&port={conn.info.port}"
    try:
        yield name, f"postgresql://{name}:{quote(password)}@/{where}"
    finally:
        run_sql(dsn, "DROP OWNED BY {r}", r=name)
        run_sql(dsn, "DROP ROLE {r}", r=name)


def spawn_worker(
    config: Path, log: IO[str], env: Mapping[str, str], *args: str, quiet: bool = False
) -> subprocess.Popen[bytes]:
    """Start `awa --config CONFIG worker ARGS` from the repository in its own session (so a
    test can signal the whole group), stderr into ``log``, stdout dropped when ``quiet``."""
    return subprocess.Popen(
        [sys.executable, "-m", "awa_cli", "--config", str(config), "worker", *args],
        env=dict(env),
        cwd=ROOT,
        stderr=log,
        stdout=subprocess.DEVNULL if quiet else None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


class AwaWorker:
    """A real `awa worker` started by :func:`spawn_worker` (stdout dropped), its stderr in
    ``log_path``."""

    def __init__(self, config: Path, log_path: Path, env: Mapping[str, str], *args: str) -> None:
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = spawn_worker(config, log, env, *args, quiet=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM the worker and wait for it; after 30 s SIGKILL its process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.contextmanager
def terminated_at_exit(
    procs: list[subprocess.Popen[str]],
) -> Iterator[list[subprocess.Popen[str]]]:
    """Yield ``procs``; at the end SIGTERM those still running, then wait for all (30 s each)."""
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


AWA = str(Path(sys.executable).parent / "awa")  # the venv's `awa` script


def run_captured(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (from the repository unless ``cwd``), its output captured as text; the exit
    code is not checked (the caller asserts what it expects)."""
    return subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def run_python(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository (see :func:`run_captured`)."""
    return run_captured([sys.executable, *args], env=env, timeout=timeout)


def build_wheel(workdir: Path, timeout: float = 300) -> Path:
    """Build awa's wheel from a clean copy of the sources under ``workdir`` (so the checkout
    gets no build/ or egg-info) and return it. An isolated build fetches the pinned
    setuptools; offline it falls back to the venv's own (setuptools >= 70.1 or ``wheel``)."""
    src, out = workdir / "src", workdir / "dist"
    ignore = shutil.ignore_patterns(
        ".venv",
        ".git",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".awa",
        "tests",
        ".pytest_cache",
    )
    shutil.copytree(ROOT, src, ignore=ignore)
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(out)]
    proc = run_captured(cmd, cwd=src, timeout=timeout)
    if proc.returncode != 0 and importlib.util.find_spec("setuptools") is not None:
        proc = run_captured([*cmd, "--no-isolation", "--skip-dependency-check"], cwd=src)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("awa_worker-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    return wheels[0]


def stop_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM a process started in its own session (its whole group) if it still runs; after
    ``timeout`` seconds SIGKILL the group and reap it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def complete_at_once(job: awa.Job) -> None:
    """A handler that does nothing: its job completes."""
    return None


def add_noop_tasks(app: awa.App, *args_types: type, queue: str | None = None) -> awa.App:
    """Register :func:`complete_at_once` as the handler of each of ``args_types`` (on ``queue``
    when given); returns ``app``."""
    for args_type in args_types:
        app.task(args_type, queue=queue)(complete_at_once)
    return app


def job_state_is(client: awa.AsyncClient, job_id: int, state: str) -> Callable[[], Awaitable[bool]]:
    """A check for :func:`wait_until`: job ``job_id``, read through ``client``, is in ``state``."""

    async def check() -> bool:
        return (await client.get_job(job_id)).state == state

    return check


def awa_on(dsn: str, config: Path, *args: str) -> Result:
    """``awa --config CONFIG --database-url DSN ARGS...`` in-process, by :class:`AwaRunner`."""
    return AwaRunner().awa("--config", str(config), "--database-url", dsn, *args)


def execute(dsn: str, statement: str, *params: object) -> None:
    """Run one ``statement`` with ``params`` in autocommit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def scalar(dsn: str, query: str, *params: object) -> Any:
    """The first column of the first row of ``query`` (None without a row), in autocommit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]


class Stoppable(Protocol):
    def stop(self) -> None: ...


StoppableT = TypeVar("StoppableT", bound=Stoppable)


@contextlib.contextmanager
def stopped_at_exit(started: StoppableT) -> Iterator[StoppableT]:
    """Yield ``started`` (a server, a pooler: anything with ``stop()``); stop it at the end."""
    try:
        yield started
    finally:
        started.stop()


def run_in_threads(targets: Sequence[Callable[[], object]], timeout: float | None = None) -> None:
    """Start a thread for each of ``targets`` at once, then join each (``timeout`` seconds at
    the most each, or without end)."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def results_in_threads(count: int, run: Callable[[int], Any], timeout: float) -> list[Any]:
    """Call ``run(0)`` .. ``run(count - 1)`` each in its own thread (a race: ``run`` waits at
    the caller's barrier where the race starts) and join them, ``timeout`` seconds each; what
    each call returned or the exception it raised, in the order they finished."""
    results: list[Any] = []
    lock = threading.Lock()

    def call(index: int) -> None:
        try:
            outcome = run(index)
        except BaseException as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    run_in_threads([functools.partial(call, i) for i in range(count)], timeout)
    return results


def insert_chain(dsn: str, name: str, *steps: tuple[str, Any]) -> awa.WorkflowRun:
    """Insert (with a sync Client) the workflow ``name`` of ``steps`` (step name, args), each
    after the one before it."""
    wf = awa.Workflow(name)
    previous: list[Any] = []
    for step, args in steps:
        previous = [wf.add(step, args, after=previous)]
    with awa.Client(dsn) as client:
        return client.insert_workflow(wf)
