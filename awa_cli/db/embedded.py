"""The embedded PostgreSQL: a real server run from a data directory, started on demand.

``EmbeddedPostgres(data_dir).start()`` initialises the directory on first use (``initdb``,
trust auth, UTF8, superuser ``postgres``, a database ``awa``), starts the server with
``pg_ctl`` if it is not running, and returns a DSN. The server listens on a unix socket
only (no TCP) and keeps running after the Python process exits; every ``awa`` process that
uses the same data directory shares it. Init, start and stop are serialised by an
``fcntl`` lock on ``<data_dir>.lock``, so concurrent callers end with one server.

PostgreSQL refuses to run as root. When awa runs as root, the server runs as the
unprivileged system user ``awa`` (created on demand, ``nobody`` as a last resort), which
owns the data and socket directories.

The test suite's scratch servers (``tests/pgcluster.py``) use the same machinery.

Never imports click or rich.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from awa_cli.db.statements import SQL
from awa_cli.db.server_user import (
    ServerUser,
    ensure_readable_tree,
    ensure_traversable,
    notice,
    server_user,
)
from awa_cli.errors import EmbeddedError

SUPERUSER = "postgres"
DATABASE = "awa"
PORT = 5432
# sun_path is 108 bytes including the NUL; keep a margin.
_MAX_SOCKET_PATH = 100
_START_TIMEOUT = 60
_BIN_TOOLS = ("pg_ctl", "initdb", "postgres")
_INSTALL_HINT = (
    "no PostgreSQL binaries found: pip install 'awa-worker[embedded]' or install PostgreSQL "
    "(pg_ctl, initdb and postgres on PATH), or set [database] url"
)


# --------------------------------------------------------------------------- binaries


def _pgserver_bin() -> Path | None:
    # Located without importing it: importing pgserver has side effects (platformdirs).
    try:
        spec = importlib.util.find_spec("pgserver")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "pginstall" / "bin"


def _system_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


def _usable(bin_dir: Path | None) -> bool:
    return bin_dir is not None and all(os.access(bin_dir / tool, os.X_OK) for tool in _BIN_TOOLS)


def _candidates(prefer_system: bool) -> list[Path]:
    order = [_system_bin, _pgserver_bin] if prefer_system else [_pgserver_bin, _system_bin]
    found: list[Path] = []
    for locate in order:
        bin_dir = locate()
        if bin_dir is not None and _usable(bin_dir) and bin_dir not in found:
            found.append(bin_dir)
    return found


def find_pg_bin(prefer_system: bool = False) -> Path:
    """The folder holding ``pg_ctl``, ``initdb`` and ``postgres``.

    pgserver's bundled binaries first (system ones first with ``prefer_system``).
    """
    found = _candidates(prefer_system)
    if not found:
        raise EmbeddedError(_INSTALL_HINT)
    return found[0]


def _major_version(bin_dir: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    # "postgres (PostgreSQL) 16.2" / "postgres (PostgreSQL) 15.18 (Debian ...)"
    for word in out.split():
        if word[:1].isdigit():
            return word.split(".")[0]
    return None


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class EmbeddedStatus:
    running: bool
    pid: int | None
    data_dir: Path
    socket_dir: Path
    dsn: str | None


def _socket_dir_for(data_dir: Path) -> Path:
    if len(os.fsencode(data_dir / f".s.PGSQL.{PORT}")) <= _MAX_SOCKET_PATH:
        return data_dir
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:16]
    tmp = Path("/tmp") if os.path.isdir("/tmp") else Path(tempfile.gettempdir())
    return tmp / f"awa-{digest}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    comm = Path(f"/proc/{pid}/comm")
    if comm.parent.exists():  # Linux: make sure a recycled pid is not taken for the server
        try:
            return comm.read_text().strip() in ("postgres", "postmaster")
        except OSError:
            return False
    return True


class EmbeddedPostgres:
    """A PostgreSQL server run from ``data_dir``, shared by every process that uses it."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        prefer_system: bool = False,
        settings: Mapping[str, str | int] | None = None,
        database: str | None = DATABASE,
        fast_init: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().absolute()
        self.prefer_system = prefer_system
        self.socket_dir = _socket_dir_for(self.data_dir)
        self.port = PORT
        self.user = SUPERUSER
        self.database = database
        self._settings = dict(settings or {})
        self._fast_init = fast_init
        self.lock_path = self.data_dir.with_name(self.data_dir.name + ".lock")
        self.log_path = self.data_dir / "log" / "postgres.log"

    # ----- public

    def dsn_for(self, dbname: str) -> str:
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://{self.user}@/{quote(dbname, safe='')}?host={host}&port={self.port}"

    def dsn(self) -> str:
        """The DSN of the ``awa`` database (the server is not started)."""
        return self.dsn_for(self.database or "postgres")

    def initialised(self) -> bool:
        """Whether the data directory holds a cluster (``initdb`` ran)."""
        return (self.data_dir / "PG_VERSION").exists()

    def status(self) -> EmbeddedStatus:
        pid = self._running_pid()
        return EmbeddedStatus(
            running=pid is not None,
            pid=pid,
            data_dir=self.data_dir,
            socket_dir=self.socket_dir,
            dsn=self.dsn() if pid is not None else None,
        )

    def start(self) -> str:
        """Start the server if needed (initialising the data dir on first use); the DSN."""
        with self._locked():
            if self._running_pid() is None:
                user = server_user(notice=notice)
                bin_dir = self._bin_dir()
                if user is not None:
                    self._prepare_for(user, bin_dir)
                if not (self.data_dir / "PG_VERSION").exists():
                    self._initdb(bin_dir, user)
                self._ensure_socket_dir(user)
                self._pg_ctl_start(bin_dir, user)
            if self.database:
                self._ensure_database(self.database)
        return self.dsn()

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server (fast shutdown); whether it was running."""
        with self._locked():
            if self._running_pid() is None:
                return False
            user = server_user()
            bin_dir = self._bin_dir()
            result = self._run(
                [
                    str(bin_dir / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    mode,
                    "-w",
                    "-t",
                    str(_START_TIMEOUT),
                ],
                user,
            )
            if result.returncode != 0 and self._running_pid() is not None:
                raise EmbeddedError(f"pg_ctl stop failed for {self.data_dir}: {_last_line(result)}")
            return True

    # ----- internals

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _running_pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first.strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def _bin_dir(self) -> Path:
        candidates = _candidates(self.prefer_system)
        if not candidates:
            raise EmbeddedError(_INSTALL_HINT)
        try:
            wanted = (self.data_dir / "PG_VERSION").read_text().strip()
        except OSError:
            return candidates[0]
        for bin_dir in candidates:
            if _major_version(bin_dir) == wanted:
                return bin_dir
        raise EmbeddedError(
            f"the data directory {self.data_dir} was created by PostgreSQL {wanted}, "
            f"but only other versions are installed ({', '.join(map(str, candidates))})"
        )

    def _prepare_for(self, user: ServerUser, bin_dir: Path) -> None:
        """As root: let the server user reach the binaries and own its directories."""
        install = bin_dir.parent
        pgserver_bin = _pgserver_bin()
        if pgserver_bin is not None and bin_dir == pgserver_bin:
            ensure_traversable(install, user, notice)
            ensure_readable_tree(install)
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        ensure_traversable(self.data_dir, user, notice)
        st = self.data_dir.stat()
        if st.st_uid != user.uid:
            for dirpath, _dirnames, filenames in os.walk(self.data_dir):
                os.chown(dirpath, user.uid, user.gid)
                for name in filenames:
                    os.chown(os.path.join(dirpath, name), user.uid, user.gid, follow_symlinks=False)

    def _initdb(self, bin_dir: Path, user: ServerUser | None) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        leftovers = [p for p in self.data_dir.iterdir() if p.name != "log"]
        if leftovers:
            raise EmbeddedError(
                f"{self.data_dir} is not empty and is not a PostgreSQL data directory; "
                "choose another [database] embedded_dir"
            )
        log_dir = self.log_path.parent
        moved_log = None
        if log_dir.exists():  # initdb wants an empty directory
            moved_log = Path(tempfile.mkdtemp(prefix="awa-log-", dir=self.data_dir.parent))
            log_dir.rename(moved_log / "log")
        cmd = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]
        if self._fast_init:
            cmd.append("--no-sync")
        result = self._run(cmd, user)
        if moved_log is not None:
            (moved_log / "log").rename(log_dir)
            moved_log.rmdir()
        if result.returncode != 0:
            raise EmbeddedError(f"initdb failed for {self.data_dir}: {_last_line(result)}")
        settings: dict[str, str | int] = {
            "listen_addresses": "",
            "port": self.port,
            "unix_socket_directories": str(self.socket_dir),
            "unix_socket_permissions": "0700",
            "logging_collector": "off",
        }
        settings.update(self._settings)
        lines = ["", "# awa embedded server"]
        for key, value in settings.items():
            rendered = (
                value if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
            )
            lines.append(f"{key} = {rendered}")
        with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n".join(lines) + "\n")
        self.data_dir.chmod(0o700)

    def _ensure_socket_dir(self, user: ServerUser | None) -> None:
        owner = user.uid if user is not None else os.geteuid()
        if self.socket_dir != self.data_dir:
            try:
                self.socket_dir.mkdir(mode=0o700)
            except FileExistsError:
                pass
            st = self.socket_dir.lstat()
            if not stat.S_ISDIR(st.st_mode) or (st.st_uid not in (owner, os.geteuid())):
                raise EmbeddedError(f"socket directory {self.socket_dir} is owned by someone else")
            if user is not None:
                os.chown(self.socket_dir, user.uid, user.gid)
            self.socket_dir.chmod(0o700)
        log_dir = self.log_path.parent
        log_dir.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            os.chown(log_dir, user.uid, user.gid)
            if self.log_path.exists():
                os.chown(self.log_path, user.uid, user.gid)

    def _pg_ctl_start(self, bin_dir: Path, user: ServerUser | None) -> None:
        # The socket settings are given again on the command line so a moved socket dir
        # (e.g. /tmp wiped by a reboot) is always the one computed from the data dir.
        options = f"-c listen_addresses='' -k {shlex.quote(str(self.socket_dir))} -p {self.port}"
        result = self._run(
            [
                str(bin_dir / "pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-o",
                options,
                "-w",
                "-t",
                str(_START_TIMEOUT),
            ],
            user,
        )
        if result.returncode != 0:
            tail = ""
            try:
                tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1]
            except (OSError, IndexError):
                pass
            raise EmbeddedError(
                f"could not start PostgreSQL in {self.data_dir}: {tail or _last_line(result)} "
                f"(log: {self.log_path})"
            )

    def _ensure_database(self, name: str) -> None:
        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            exists = conn.execute(SQL["database_exists"], {"name": name}).fetchone()
            if not exists:
                conn.execute(sql.SQL(SQL["create_database"]).format(sql.Identifier(name)))

    def _run(self, cmd: list[str], user: ServerUser | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        kwargs: dict[str, Any] = {}
        if user is not None:
            kwargs = {"user": user.uid, "group": user.gid, "extra_groups": []}
            env["HOME"] = "/"
            env["USER"] = env["LOGNAME"] = user.name
        return subprocess.run(
            cmd,
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    text = (result.stderr or result.stdout or "").strip()
    return text.splitlines()[-1] if text else f"exit code {result.returncode}"


__all__ = [
    "EmbeddedError",
    "EmbeddedPostgres",
    "EmbeddedStatus",
    "find_pg_bin",
]
