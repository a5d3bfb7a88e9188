"""The PostgreSQL the benchmarks run on: a given server, or a durable throwaway one."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from awa_cli.db.embedded import EmbeddedPostgres
from awa_cli.db.migrations import migrate_dsn

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchServer:
    def __init__(self, url: str | None, tmp: Path) -> None:
        self.embedded: EmbeddedPostgres | None = None
        if url is None:
            # Durable commits: fsync, synchronous_commit and full_page_writes keep their defaults.
            self.embedded = EmbeddedPostgres(
                tmp / "data",
                prefer_system=True,
                database=None,
                settings={"max_connections": 200, "shared_buffers": "256MB"},
            )
            self.embedded.start()
            url = self.embedded.dsn_for("postgres")
        self.admin_dsn = url
        self.admin = psycopg.connect(url, autocommit=True)

    def close(self) -> None:
        self.admin.close()
        if self.embedded is not None:
            self.embedded.stop()

    def version(self) -> str:
        return str(self.admin.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]

    def setting(self, name: str) -> str:
        return str(self.admin.execute("SELECT current_setting(%s)", (name,)).fetchone()[0])  # type: ignore[index]

    def fresh_database(self, name: str) -> str:
        self.admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        params = conninfo_to_dict(self.admin_dsn)
        params["dbname"] = name
        dsn = make_conninfo(**params)  # type: ignore[arg-type]
        migrate_dsn(dsn)
        return dsn

    def drop_database(self, dsn: str) -> None:
        name = conninfo_to_dict(dsn)["dbname"]
        self.admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def snapshot(self, dsn: str) -> dict[str, Any]:
        """Commits of the database, the WAL position, and PostgreSQL's CPU seconds so far."""
        time.sleep(1.1)  # backends flush their statistics at most once a second
        name = conninfo_to_dict(dsn)["dbname"]
        commits, lsn = self.admin.execute(
            "SELECT xact_commit, pg_current_wal_lsn() FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()  # type: ignore[misc]
        return {"commits": int(commits), "lsn": str(lsn), "cpu": self.postgres_cpu()}

    def wal_bytes(self, before: str, after: str) -> int:
        return int(
            self.admin.execute("SELECT pg_wal_lsn_diff(%s, %s)", (after, before)).fetchone()[0]
        )  # type: ignore[index]

    def postgres_cpu(self) -> float:
        """CPU seconds of the postmaster, its live children and its reaped children."""
        pid = int(self.admin.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        total = process_cpu(ppid, children=True)
        for child in Path(f"/proc/{ppid}/task/{ppid}/children").read_text().split():
            total += process_cpu(int(child))
        return total


def tree_cpu(pid: int) -> float:
    """CPU seconds of a live process and its live descendants (a worker and its children)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        children = []
    return process_cpu(pid) + sum(tree_cpu(int(c)) for c in children)


def process_cpu(pid: int, children: bool = False) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / CLOCK_TICKS
