"""`awa serve` across a database restart (issue 27 D6): the pool tests a connection that sat
idle before a request gets it, so no request after the restart sees a dead one, and
`/readyz` answers 503 while the database is unreachable."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from awa_cli.db.migrations import migrate_dsn
from tests.integration.serve.test_serve_command import free_port, get, spawn_serve
from tests.pgcluster import ThrowawayCluster

pytestmark = pytest.mark.integration


def status_of(url: str) -> int:
    try:
        return get(url)[0]
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def test_no_request_sees_a_dead_connection_after_a_restart(
    own_server: ThrowawayCluster, tmp_path: Path
) -> None:
    dsn = own_server.dsn_for("postgres")
    migrate_dsn(dsn)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = spawn_serve(dsn, tmp_path, port, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while status_of(f"{base}/readyz") != 200:
            assert proc.poll() is None and time.monotonic() < deadline, "awa serve did not come up"
            time.sleep(0.1)
        # several connections in the pool, as after a day of traffic
        assert [status_of(f"{base}/api/stats") for _ in range(4)] == [200] * 4
        own_server.server.stop("fast")
        began = time.monotonic()
        assert status_of(f"{base}/readyz") == 503
        assert time.monotonic() - began < 10  # answers promptly, not after a pool timeout
        own_server.server.start()
        with psycopg.connect(dsn, connect_timeout=10):
            pass
        time.sleep(1.5)  # the pooled connections (all dead now) sat idle
        codes = [status_of(f"{base}/api/stats") for _ in range(6)]
        assert codes == [200] * 6, codes
        assert status_of(f"{base}/readyz") == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
