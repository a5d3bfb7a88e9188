"""Real clients in other languages enqueue through ``awa.enqueue`` (architecture §17), and a
real `awa worker` process runs each job exactly once with its args intact, unicode and all:
``psql`` (Debian's postgresql-client) and Node's ``pg`` from the npm registry (installed at
test time into a cache directory). The same job enqueued from Python, psql and Node stores
the same row.

Without psql, node or npm these tests skip with the reason, except in CI (``CI=true``; .ci/run
installs postgresql-client, nodejs and npm), where a missing client fails the run.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import awa_cli as awa
from tests.apps.polyglot import SIDE_TABLE
from tests.helpers import AwaWorker, ROOT
from tests.integration.db.enqueue_vectors import ROW_SQL

pytestmark = [pytest.mark.integration]

# Args every client sends: scripts beyond Latin-1, an astral character, a line separator,
# quotes and backslashes, nested values.
UNICODE_ARGS: dict[str, Any] = {
    "greeting": "Grüße, Zoë! 日本語 😀 𝄞",
    "quote": 'it\'s "quoted" \\ back\u2028slash',
    "nested": {"ß": [1, 2.5, None, True], "emoji": "🚀"},
}
NODE_PG = "pg@8"
NODE_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "awa-tests" / "node-pg"
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(tool: str, package: str) -> str:
    """The tool's path; skips (or fails, in CI) when it is not installed."""
    found = shutil.which(tool)
    if found:
        return found
    reason = f"{tool} is missing (apt-get install -y {package}; .ci/run installs it)"
    if in_ci():
        pytest.fail(f"CI needs the any-language enqueue tests: {reason}")
    pytest.skip(reason)


def libpq_env(dsn: str) -> dict[str, str]:
    """The connection as libpq's environment variables, which psql and Node's pg both read."""
    info = conninfo_to_dict(dsn)
    names = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "dbname": "PGDATABASE",
        "password": "PGPASSWORD",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "AWA_"))}
    env.update({names[k]: str(v) for k, v in info.items() if k in names and v is not None})
    return env


@pytest.fixture(scope="session")
def node_pg() -> Path:
    """A directory whose node_modules holds Node's pg, installed once with npm and cached."""
    require("node", "nodejs")
    npm = require("npm", "npm")
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    with (NODE_CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers install once, one at a time
        if not (NODE_CACHE / "node_modules" / "pg" / "package.json").exists():
            done = subprocess.run(
                [npm, "install", NODE_PG, "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_CACHE,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                reason = f"npm install {NODE_PG} failed: {done.stderr.strip()[-500:]}"
                if in_ci():
                    pytest.fail(reason)
                pytest.skip(reason)
    return NODE_CACHE


class Worker(AwaWorker):
    """A real `awa worker` process running tests/apps/polyglot.py."""

    def __init__(self, tmp_path: Path, dsn: str) -> None:
        config = tmp_path / "awa.toml"
        config.write_text(
            '[app]\nmodules = ["tests.apps.polyglot"]\n'
            "[queues.default]\nconcurrency = 4\n[queues.email]\nconcurrency = 2\n"
        )
        env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        env.pop("AWA_CONFIG", None)
        super().__init__(config, tmp_path / "worker.log", env)


@pytest.fixture
def worker(tmp_path: Path, dsn: str) -> Iterator[Worker]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)  # type: ignore[arg-type]
    running = Worker(tmp_path, dsn)
    try:
        yield running
    finally:
        running.stop()


def wait_for_runs(dsn: str, ids: list[int], worker: Worker, timeout: float = 60) -> dict[int, Any]:
    """Wait until every job is completed; then each job's runs: {id: [args, ...]}."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT count(*) FROM awa.jobs WHERE id = ANY(%s) AND state = 'completed'", (ids,)
            ).fetchone()
            assert done is not None
            if done[0] == len(ids):
                break
            assert worker.proc.poll() is None, worker.log()
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        time.sleep(0.5)  # a second run, were there one, would have time to show
        runs: dict[int, list[Any]] = {}
        for job_id, args, attempt in conn.execute(
            "SELECT job_id, args, attempt FROM awa_test.polyglot_runs ORDER BY at"
        ):
            assert attempt == 1
            runs.setdefault(job_id, []).append(args)
        return runs


def psql(dsn: str, script: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            require("psql", "postgresql-client"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            *options,
        ],
        input=script,
        env=libpq_env(dsn),
        capture_output=True,
        text=True,
        timeout=60,
    )


def node(dsn: str, node_pg: Path, script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = libpq_env(dsn) | {"NODE_PATH": str(node_pg / "node_modules")}
    return subprocess.run(
        [require("node", "nodejs"), "-e", script, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


PSQL_ENQUEUE = """
SELECT awa.enqueue(kind => 'polyglot_echo', args => :'args'::jsonb || jsonb_build_object('n', n))
FROM generate_series(1, 5) AS n;
SELECT awa.enqueue_many(:'many'::jsonb);
"""


def test_psql_enqueues_jobs_a_python_worker_runs_once(dsn: str, worker: Worker) -> None:
    many = [{"kind": "polyglot_echo", "args": {**UNICODE_ARGS, "n": n}} for n in (6, 7)]
    done = psql(
        dsn,
        PSQL_ENQUEUE,
        "-v",
        f"args={json.dumps(UNICODE_ARGS)}",
        "-v",
        f"many={json.dumps(many, ensure_ascii=False)}",
    )
    assert done.returncode == 0, done.stderr
    ids = [int(line) for line in done.stdout.split()]
    assert len(ids) == 7
    runs = wait_for_runs(dsn, ids, worker)
    assert sorted(runs) == sorted(ids)
    for job_id, n in zip(ids, range(1, 8), strict=True):
        assert runs[job_id] == [{**UNICODE_ARGS, "n": n}]  # exactly once, args intact


def test_psql_reports_a_bad_field_with_sqlstate_22023(dsn: str) -> None:
    done = psql(dsn, "\\set VERBOSITY verbose\nSELECT awa.enqueue(kind => 'x', priority => 9);\n")
    assert done.returncode == 3, done  # psql's exit code for a failed script (ON_ERROR_STOP)
    assert "ERROR:  22023: priority: must be between 1 and 4, got 9" in done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)


NODE_ENQUEUE = r"""
const { Client } = require('pg');
(async () => {
  const client = new Client();
  await client.connect();
  const args = JSON.parse(process.argv[1]);
  const ids = [];
  for (let n = 1; n <= 5; n++) {
    const res = await client.query(
      'SELECT awa.enqueue(kind => $1, args => $2::jsonb, tags => $3) AS id',
      ['polyglot_echo', JSON.stringify({ ...args, n }), ['node', 'ünïcode']]);
    ids.push(Number(res.rows[0].id));
  }
  const many = [6, 7].map((n) => ({ kind: 'polyglot_echo', args: { ...args, n } }));
  const res = await client.query('SELECT id FROM awa.enqueue_many($1::jsonb) AS id',
                                 [JSON.stringify(many)]);
  for (const row of res.rows) ids.push(Number(row.id));
  let error = null;
  try {
    await client.query('SELECT awa.enqueue(kind => $1, priority => $2)', ['polyglot_echo', 9]);
  } catch (e) {
    error = { code: e.code, column: e.column, message: e.message };
  }
  await client.end();
  console.log(JSON.stringify({ ids, error }));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_node_pg_enqueues_jobs_a_python_worker_runs_once(
    dsn: str, worker: Worker, node_pg: Path
) -> None:
    done = node(dsn, node_pg, NODE_ENQUEUE, json.dumps(UNICODE_ARGS))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["error"] == {
        "code": "22023",
        "column": "priority",
        "message": "priority: must be between 1 and 4, got 9",
    }
    ids = out["ids"]
    assert len(ids) == 7
    runs = wait_for_runs(dsn, ids, worker)
    assert sorted(runs) == sorted(ids)
    for job_id, n in zip(ids, range(1, 8), strict=True):
        assert runs[job_id] == [{**UNICODE_ARGS, "n": n}]
    with psycopg.connect(dsn) as conn:
        tags = conn.execute("SELECT tags FROM awa.jobs WHERE id = %s", (ids[0],)).fetchone()
    assert tags == (["node", "ünïcode"],)


# One job with every option, as each producer spells it.
SAME_JOB: dict[str, Any] = {
    "kind": "polyglot_echo",
    "args": UNICODE_ARGS,
    "queue": "email",
    "priority": 1,
    "run_at": "2999-01-01T00:00:00+00:00",
    "max_attempts": 7,
    "metadata": {"tenant": "t-ü"},
    "tags": ["a", "ß"],
    "unique_opts": {"by_queue": True, "states": ["scheduled", "available"]},
    "deadline_duration": 30,
    "ordering_key": "customer-7",
    "concurrency_key": "tenant-ü",
}
PSQL_SAME = """
SELECT awa.enqueue(kind => :'kind', args => :'args'::jsonb, queue => :'queue',
                   priority => :priority, run_at => :'run_at', max_attempts => :max_attempts,
                   metadata => :'metadata'::jsonb, tags => ARRAY['a', 'ß'],
                   unique_opts => :'unique_opts'::jsonb, deadline_duration => '30 seconds',
                   ordering_key => :'ordering_key', concurrency_key => :'concurrency_key');
"""
NODE_SAME = r"""
const { Client } = require('pg');
(async () => {
  const client = new Client();
  await client.connect();
  const j = JSON.parse(process.argv[1]);
  const res = await client.query(
    `SELECT awa.enqueue(kind => $1, args => $2, queue => $3, priority => $4, run_at => $5,
                        max_attempts => $6, metadata => $7, tags => $8, unique_opts => $9,
                        deadline_duration => $10, ordering_key => $11, concurrency_key => $12) AS id`,
    [j.kind, JSON.stringify(j.args), j.queue, j.priority, j.run_at, j.max_attempts,
     JSON.stringify(j.metadata), j.tags, JSON.stringify(j.unique_opts),
     `${j.deadline_duration} seconds`, j.ordering_key, j.concurrency_key]);
  await client.end();
  console.log(res.rows[0].id);
})().catch((e) => { console.error(e); process.exit(1); });
"""


def test_python_psql_and_node_store_identical_rows(dsn: str, node_pg: Path) -> None:
    from datetime import datetime

    def take_row(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
        cur = conn.execute(ROW_SQL, (job_id,))
        record = cur.fetchone()
        assert record is not None
        row = dict(zip([d.name for d in cur.description or ()], record, strict=True))
        conn.execute("DELETE FROM awa.jobs WHERE id = %s", (job_id,))  # frees the unique key
        conn.commit()
        return row

    rows = {}
    with psycopg.connect(dsn) as conn:
        options = {k: v for k, v in SAME_JOB.items() if k != "args"}
        options["run_at"] = datetime.fromisoformat(SAME_JOB["run_at"])
        python = awa.insert(conn, SAME_JOB["args"], **options)
        conn.commit()
        rows["python"] = take_row(conn, python.id)

        variables = [
            f"{name}={value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
            for name, value in SAME_JOB.items()
        ]
        done = psql(dsn, PSQL_SAME, *(o for v in variables for o in ("-v", v)))
        assert done.returncode == 0, done.stderr
        rows["psql"] = take_row(conn, int(done.stdout))

        done = node(dsn, node_pg, NODE_SAME, json.dumps(SAME_JOB))
        assert done.returncode == 0, done.stderr
        rows["node"] = take_row(conn, int(done.stdout))

    assert rows["python"]["unique_key"] is not None and rows["python"]["state"] == "scheduled"
    assert rows["psql"] == rows["python"]
    assert rows["node"] == rows["python"]
