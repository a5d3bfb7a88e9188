"""``[limits.NAME]`` checked against the loaded app (architecture §13): ``awa config check``
and ``awa worker`` exit 2 with one line naming the key for a kind or queue the app does not
have, or a key path its args type does not have; a kind with dict args accepts any path,
and the worker logs the first job whose args lack it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import AWA, ROOT, run_captured

pytestmark = [pytest.mark.integration]

APP = '[app]\nmodules = ["tests.apps.limited"]\n'


def _config(tmp_path: Path, limit: str) -> Path:
    path = tmp_path / "awa.toml"
    path.write_text(APP + limit)
    return path


def _awa(
    path: Path, *args: str, dsn: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if dsn:
        env["AWA_DATABASE_URL"] = dsn
    return run_captured([AWA, "--config", str(path), *args], env=env, timeout=timeout)


BAD = [
    pytest.param(
        'kind = "tenant_wrok"\nkey = "args.tenant"\n',
        "[limits.per_tenant] kind: no kind named 'tenant_wrok' in the app"
        " (did you mean 'tenant_work'?)",
        id="unknown-kind",
    ),
    pytest.param(
        'kind = "tenant_work"\nkey = "args.tenantid"\n',
        "[limits.per_tenant] key: 'args.tenantid' is not a field path of the args of"
        " tenant_work (TenantWork)",
        id="key-path-not-in-args",
    ),
    pytest.param(
        'queue = "defualt"\nkey = "args.tenant"\n',
        "[limits.per_tenant] queue: no queue named 'defualt' in the app (did you mean 'default'?)",
        id="unknown-queue",
    ),
]


@pytest.mark.parametrize(("limit", "message"), BAD)
def test_config_check_refuses_a_limit_the_app_does_not_fit(
    tmp_path: Path, limit: str, message: str
) -> None:
    path = _config(tmp_path, "[limits.per_tenant]\nmax_running = 2\n" + limit)
    result = _awa(path, "config", "check")
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(("limit", "message"), BAD)
def test_the_worker_refuses_to_start_with_such_a_limit(
    dsn: str, tmp_path: Path, limit: str, message: str
) -> None:
    path = _config(tmp_path, "[limits.per_tenant]\nmax_running = 2\n" + limit)
    result = _awa(path, "worker", dsn=dsn)
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    with psycopg.connect(dsn) as conn:  # refused before it announced anything
        assert conn.execute("SELECT count(*) FROM awa.limits").fetchone() == (0,)


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("max_running = 0\n", "[limits.per_tenant] max_running"),
        ('max_running = 2\nrate = "often"\n', "[limits.per_tenant] rate"),
    ],
)
def test_max_running_and_rate_are_checked(tmp_path: Path, limit: str, message: str) -> None:
    path = _config(
        tmp_path, '[limits.per_tenant]\nkind = "tenant_work"\nkey = "args.tenant"\n' + limit
    )
    result = _awa(path, "config", "check")
    assert result.returncode == 2, result
    assert message in result.stderr, result.stderr


def test_a_fitting_limit_passes_and_is_printed(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        '[limits.per_tenant]\nkind = "tenant_work"\nkey = "args.tenant"\nmax_running = 2\n'
        '[limits.loose]\nkind = "loose_work"\nkey = "args.anything.at_all"\nmax_running = 1\n',
    )
    result = _awa(path, "config", "check")
    assert result.returncode == 0, result
    assert "config OK" in result.stderr + result.stdout


def test_a_dict_args_job_without_the_key_path_is_logged_once(dsn: str, tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        '[limits.loose]\nkind = "loose_work"\nkey = "args.tenant"\nmax_running = 5\n',
    )
    with awa.Client(dsn) as client:
        ids = [client.insert({"n": i}, kind="loose_work").id for i in range(3)]
        client.insert({"tenant": "a"}, kind="loose_work")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWA_DATABASE_URL": dsn}
    proc = subprocess.Popen(
        [AWA, "--config", str(path), "worker"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute(
                "SELECT count(*) FROM awa.jobs WHERE state <> 'completed'"
            ).fetchone() != (0,):
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    warnings = [line for line in err.splitlines() if "has no args.tenant in its args" in line]
    assert len(warnings) == 1, err
    assert "WARNING" in warnings[0] and "[limits.loose]" in warnings[0]
    assert any(f"job {i} " in warnings[0] for i in ids)
