"""One set of limits for the fleet (architecture §13): a worker whose ``[limits]`` differ
from a live worker's logs the difference at ERROR and exits 2, unless started with
``--accept-limits-change`` (then its limits replace the announced ones); ``awa doctor``
fails while live workers disagree. Real ``awa worker`` processes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.limits.test_fleet import AWA, APP, _limit, _query, _wait, workers
from tests.helpers import ROOT, run_captured

pytestmark = [pytest.mark.integration]

CONFIG = "[queues.default]\nconcurrency = 2\n"


def _run(dsn: str, tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "other.toml"
    path.write_text(APP + config)
    env = {**os.environ, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    return run_captured([AWA, "--config", str(path), *args], env=env)


def _doctor(dsn: str, tmp_path: Path) -> tuple[int, dict[str, dict[str, str]]]:
    result = _run(dsn, tmp_path, CONFIG, "--json", "doctor")
    checks = json.loads(result.stdout)
    checks = checks["checks"] if isinstance(checks, dict) else checks
    return result.returncode, {c["name"]: c for c in checks}


def test_a_worker_with_other_limits_refuses_to_start(dsn: str, tmp_path: Path) -> None:
    with workers(dsn, tmp_path, CONFIG + _limit(2), 1) as procs:
        _wait(dsn, procs, "SELECT count(*) = 1 FROM awa.workers")
        result = _run(dsn, tmp_path, CONFIG + _limit(3), "worker")
        assert result.returncode == 2, result
        assert "ERROR" in result.stderr, result.stderr
        assert "[limits.per_tenant] max_running: fleet 2, this worker 3" in result.stderr
        assert "--accept-limits-change" in result.stderr
        assert "Traceback" not in result.stderr
        # a worker without the limits is refused too: it would claim past them
        bare = _run(dsn, tmp_path, CONFIG, "worker")
        assert bare.returncode == 2, bare
        assert "[limits.per_tenant] only in the fleet's limits" in bare.stderr
        assert _query(dsn, "SELECT max_running FROM awa.limits") == [(2,)]  # unchanged
        assert _query(dsn, "SELECT count(*) FROM awa.workers") == [(1,)]
        assert procs[0].poll() is None  # the fleet's worker runs on
        _, checks = _doctor(dsn, tmp_path)
        assert checks["limits"]["status"] == "ok", checks["limits"]


def test_accept_limits_change_replaces_them_and_doctor_fails_meanwhile(
    dsn: str, tmp_path: Path
) -> None:
    with workers(dsn, tmp_path, CONFIG + _limit(2), 1) as old:
        _wait(dsn, old, "SELECT count(*) = 1 FROM awa.workers")
        with workers(dsn, tmp_path, CONFIG + _limit(3), 1, "--accept-limits-change") as new:
            _wait(dsn, old + new, "SELECT count(*) = 2 FROM awa.workers", timeout=30)
            assert _query(dsn, "SELECT max_running FROM awa.limits") == [(3,)]  # replaced
            code, checks = _doctor(dsn, tmp_path)
            assert code != 0
            assert checks["limits"]["status"] == "fail", checks["limits"]
            assert "different [limits]" in checks["limits"]["detail"]
        # the new worker stopped: the old one alone enforces the old limits, which are no
        # longer the announced ones
        code, checks = _doctor(dsn, tmp_path)
        assert checks["limits"]["status"] == "fail", checks["limits"]
        assert "announced" in checks["limits"]["detail"]
    # nobody runs: a worker with other limits starts without the flag and announces them
    with workers(dsn, tmp_path, CONFIG + _limit(4), 1) as again:
        _wait(dsn, again, "SELECT count(*) = 1 FROM awa.workers")
        assert _query(dsn, "SELECT max_running FROM awa.limits") == [(4,)]
        code, checks = _doctor(dsn, tmp_path)
        assert checks["limits"]["status"] == "ok", checks["limits"]
