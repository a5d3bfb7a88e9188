"""A real PgBouncer (Debian's ``pgbouncer``) in front of a test server, started by the tests
on a loopback port (issue 27 item 4, architecture §18).

:func:`start_pgbouncer` writes a config (``pool_mode`` as asked, ``auth_type = any``: every
client logs in as the server's own user), starts ``/usr/sbin/pgbouncer`` (as the server's
system user when the suite runs as root: PgBouncer refuses to run as root), waits until it
accepts connections, and returns a :class:`Bouncer` whose :meth:`dsn_for` is the pooled URL.
``ignore_startup_parameters = options``: awa's pools pass session settings in the ``options``
startup parameter (PgBouncer would refuse the connection otherwise); behind a transaction
pooler they are silently dropped, which awa tolerates (docs/promises.md, "Poolers").
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tests.pgcluster import ThrowawayCluster

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_pgbouncer() -> None:
    """Skip without PgBouncer, except in CI (``.ci/run`` installs it): there it fails."""
    if os.path.exists(PGBOUNCER):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{PGBOUNCER} is missing (.ci/run installs Debian's pgbouncer)")
    pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")


class Bouncer:
    def __init__(self, root: Path, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.root = root
        self.port = port
        self.proc = proc
        self.log_path = root / "pgbouncer.log"

    def dsn_for(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "safe shutdown" is SIGINT in 1.x
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start_pgbouncer(
    cluster: ThrowawayCluster, pool_mode: str = "transaction", pool_size: int = 20
) -> Bouncer:
    require_pgbouncer()
    root = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
    port = free_port()
    host = cluster.host
    config = root / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={host} port={cluster.port} user={cluster.user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir =\nauth_type = any\npool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 500\n"
        "ignore_startup_parameters = options,extra_float_digits\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
        "server_reset_query = DISCARD ALL\nserver_check_delay = 1\n"
    )
    command = [PGBOUNCER, str(config)]
    if os.geteuid() == 0:
        user = pwd.getpwuid(os.stat(host).st_uid)  # the server's own user reaches its socket
        shutil.chown(root, user.pw_uid, user.pw_gid)
        os.chmod(root, 0o755)
        config.chmod(0o644)
        command = [PGBOUNCER, "-u", user.pw_name, str(config)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    bouncer = Bouncer(root, port, proc)
    deadline = time.monotonic() + 15
    while True:
        try:
            with psycopg.connect(bouncer.dsn_for(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return bouncer
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                bouncer.stop()
                raise RuntimeError(f"pgbouncer did not start: {err} {bouncer.log()}") from None
            time.sleep(0.1)
