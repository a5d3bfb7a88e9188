"""Unblocking is exactly once under two real ``awa worker`` processes and racing parents
(architecture §16): a 300-to-1 fan-in whose parents finish together, a fan-out below it, and
diamonds, with every execution recorded by the job itself."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.apps.workflow_app import SIDE_TABLE, Node
from tests.helpers import ROOT, terminated_at_exit

pytestmark = [pytest.mark.integration]

AWA = str(Path(sys.executable).parent / "awa")
CONFIG = '[app]\nmodules = ["tests.apps.workflow_app"]\n[queues.default]\nconcurrency = 20\n'


@contextlib.contextmanager
def workers(dsn: str, tmp_path: Path, count: int) -> Iterator[list[subprocess.Popen[str]]]:
    """``count`` real ``awa worker`` processes; SIGTERM at the end."""
    path = tmp_path / "awa.toml"
    path.write_text(CONFIG)
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([AWA, "--config", str(path), "-q", "worker"], env=env, cwd=ROOT, text=True)
        for _ in range(count)
    ]
    with terminated_at_exit(procs):
        yield procs


def _graph() -> awa.Workflow:
    wf = awa.Workflow("race")
    parents = [wf.add(f"p{i}", Node(i)) for i in range(300)]
    join = wf.add("join", Node(1000), after=parents)
    fan = [wf.add(f"f{i}", Node(2000 + i), after=[join]) for i in range(100)]
    for i in range(0, 100, 2):  # diamonds: two fan-out steps into one
        wf.add(f"d{i}", Node(3000 + i), after=[fan[i], fan[i + 1]])
    return wf


def test_two_workers_and_racing_parents_unblock_each_child_exactly_once(
    dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    with awa.Client(dsn) as client:
        run = client.insert_workflow(_graph())
        # plain after= children of the same racing parents, too
        extra = client.insert(Node(9999), after=[run.steps["p0"], run.steps["p299"]])
    total = len(run.steps) + 1
    with workers(dsn, tmp_path, 2) as procs:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with awa.Client(dsn) as client:
                if (
                    client.get_workflow(run.id).state != "running"
                    and client.get_job(extra.id).state == "completed"
                ):
                    break
            assert all(p.poll() is None for p in procs)
            time.sleep(0.2)
    with psycopg.connect(dsn) as conn:
        runs = conn.execute(
            "SELECT job_id, count(*), max(unfinished_parents), count(DISTINCT pid)"
            " FROM awa_test.wf_runs GROUP BY job_id"
        ).fetchall()
        pids = conn.execute("SELECT count(DISTINCT pid) FROM awa_test.wf_runs").fetchone()
        join_id = run.steps["join"].id
        seen = conn.execute(
            "SELECT parents_seen FROM awa_test.wf_runs WHERE job_id = %s", (join_id,)
        ).fetchone()
    assert len(runs) == total  # every step ran
    assert all(count == 1 for _, count, _, _ in runs)  # each exactly once
    assert all(unfinished == 0 for _, _, unfinished, _ in runs)  # never before its parents
    assert pids is not None and pids[0] == 2  # both workers took part
    assert seen == (300,)  # the join saw all 300 outputs
    with awa.Client(dsn) as client:
        wf = client.get_workflow(run.id)
    assert wf.state == "completed" and wf.counts == {"completed": len(run.steps)}
