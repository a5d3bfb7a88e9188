"""Two PostgreSQL servers on this machine: a primary and a streaming standby made from it by
``pg_basebackup -R``, replicating synchronously (``synchronous_standby_names = '*'`` on the
primary), for the failover runs (issue 27 item 5, tests/reliability/test_failover.py).

Both listen on unix sockets only, each in its own directory; :attr:`Pair.dsn` is the
multi-host connection string an application would use, ``target_session_attrs=read-write``
finding whichever is the primary now. :meth:`Pair.promote` promotes the standby
(``pg_ctl promote``), :meth:`Pair.stop_primary` stops the old primary.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg

from awa_cli.db.embedded import EmbeddedPostgres
from awa_cli.db.server_user import server_user

SETTINGS: dict[str, str | int] = {
    "max_connections": 200,
    "wal_level": "replica",
    "max_wal_senders": 5,
    "hot_standby": "on",
    "synchronous_standby_names": "*",
    "synchronous_commit": "on",
    "fsync": "off",  # no server restarts after a crash here: speed, as in tests/pgcluster.py
}


class Pair:
    def __init__(self, root: Path, primary: EmbeddedPostgres, standby: EmbeddedPostgres) -> None:
        self.root = root
        self.primary = primary
        self.standby = standby

    @property
    def dsn(self) -> str:
        hosts = ",".join(quote(str(s.socket_dir), safe="") for s in (self.primary, self.standby))
        ports = f"{self.primary.port},{self.standby.port}"
        return (
            f"postgresql://postgres@/postgres?host={hosts}&port={ports}"
            "&target_session_attrs=read-write&connect_timeout=3"
        )

    def sync_state(self) -> str | None:
        with psycopg.connect(self.primary.dsn_for("postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
        return None if row is None else str(row[0])

    def promote(self) -> None:
        user = server_user()
        bin_dir = self.standby._bin_dir()
        done = self.standby._run(
            [str(bin_dir / "pg_ctl"), "promote", "-w", "-D", str(self.standby.data_dir)], user
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl promote failed: {done.stderr or done.stdout}")

    def stop_primary(self, mode: str = "immediate") -> None:
        self.primary.stop(mode)

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            try:
                server.stop("immediate")
            except Exception:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def start_pair() -> Pair:
    root = Path(tempfile.mkdtemp(prefix="awa-pg-pair-"))
    primary = EmbeddedPostgres(
        root / "primary", prefer_system=True, database=None, fast_init=True, settings=SETTINGS
    )
    standby = EmbeddedPostgres(root / "standby", prefer_system=True, database=None)
    pair = Pair(root, primary, standby)
    try:
        primary.start()
        user = server_user()
        if user is not None:
            shutil.chown(root, user.uid, user.gid)
        bin_dir = primary._bin_dir()
        done = primary._run(
            [
                str(bin_dir / "pg_basebackup"),
                "-D",
                str(standby.data_dir),
                "-R",
                "-X",
                "stream",
                "-h",
                str(primary.socket_dir),
                "-p",
                str(primary.port),
                "-U",
                primary.user,
            ],
            user,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {done.stderr or done.stdout}")
        for leftover in standby.data_dir.glob(".s.PGSQL.*"):  # the primary's socket lock
            leftover.unlink()
        with (standby.data_dir / "postgresql.auto.conf").open("a") as conf:
            # promoted, it has no standby of its own: it must not wait for one
            conf.write("synchronous_standby_names = ''\n")
        standby.start()
        deadline = time.monotonic() + 30
        while pair.sync_state() != "sync":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not synchronous: {pair.sync_state()}")
            time.sleep(0.1)
    except BaseException:
        pair.stop()
        raise
    return pair
