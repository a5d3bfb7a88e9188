"""Real ``awa worker`` processes (no supervisor) on tests/apps/outage.py, for the outage,
deploy, pooler and failover runs: each logs to a file; the handlers record every run in
``runs.txt`` so runs are counted without the database."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.helpers import AwaWorker
from tests.reliability.harness import env_for

FAST = {"heartbeat_interval": 0.5, "heartbeat_staleness": 2.0, "rescue_interval": 0.5}


def write_config(
    tmp_path: Path, timings: dict[str, float], concurrency: int = 10, extra: str = ""
) -> Path:
    config = tmp_path / "awa.toml"
    lines = "".join(f'{key} = "{value}s"\n' for key, value in timings.items())
    config.write_text(
        '[app]\nmodules = ["tests.apps.outage"]\n'
        f"[queues.default]\nconcurrency = {concurrency}\n"
        '[worker]\nshutdown_timeout = "5s"\n'
        f'[maintenance]\nleader_election_interval = "0.5s"\n{lines}' + extra
    )
    return config


class WorkerProcess(AwaWorker):
    """One real ``awa worker`` (no supervisor unless ``args`` asks for ``--processes``), its
    stderr in a file; ``env`` adds variables (``NOTIFY_SOCKET``, ...)."""

    def __init__(
        self,
        tmp_path: Path,
        name: str,
        config: Path,
        dsn: str,
        runs: Path,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        env = {**env_for(dsn), "AWA_TEST_RUNS": str(runs), **(env or {})}
        super().__init__(config, tmp_path / f"{name}.log", env, *args)


def runs(path: Path) -> Counter[int]:
    """How many times each job's handler started."""
    if not path.exists():
        return Counter()
    return Counter(
        int(line.split()[0]) for line in path.read_text().splitlines() if "start" in line
    )


def running_by(dsn: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, attempted_by FROM awa.jobs WHERE state = 'running'"
        ).fetchall()
    return {row[0]: row[1] for row in rows}


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, *procs: WorkerProcess
) -> float:
    started = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - started
        except psycopg.OperationalError:
            pass  # the server is coming back
        for proc in procs:
            assert proc.proc.poll() is None, f"a worker exited:\n{proc.log()[-3000:]}"
        assert time.monotonic() - started < timeout, f"{what} not within {timeout}s\n" + "\n".join(
            p.log()[-3000:] for p in procs
        )
        time.sleep(0.1)


def final_rows(dsn: str) -> list[tuple[int, str, int, list[object]]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, state::text, attempt, errors FROM awa.jobs ORDER BY id"
        ).fetchall()
