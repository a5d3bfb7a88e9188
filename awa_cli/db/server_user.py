"""Running the embedded server as root: PostgreSQL refuses to run as root, so the server
runs as the unprivileged system user ``awa`` (created on demand, ``nobody`` as a last resort),
and the directories it must reach are made traversable. Each change to the system is said on
stderr once (README "When things go wrong", awa-db(1)).

Never imports click or rich.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "awa"


@dataclass(frozen=True)
class ServerUser:
    name: str
    uid: int
    gid: int


def notice(text: str) -> None:
    """Tell the person at the terminal what was done to their system (stderr, one line)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def server_user(notice: Callable[[str], None] | None = None) -> ServerUser | None:
    """The user the server runs as when we are root, else None (run as ourselves).

    With ``notice``, says so (and whether the system user was created just now).
    """
    if os.geteuid() != 0:
        return None
    created = ""
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        entry, created = _create_server_user()
    assert entry is not None  # getpwnam raises rather than returning None
    if notice is not None:
        notice(f"running as root: the server runs as system user {entry.pw_name!r}{created}")
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _create_server_user() -> tuple[pwd.struct_passwd, str]:
    """Create the system user, one awa process at a time: two concurrent ``useradd`` runs
    (parallel test workers, two ``awa db start``) could each write /etc/passwd, and the
    loser's uid vanished under it ("initdb: could not look up effective user ID 999")."""
    lock_path = Path(tempfile.gettempdir()) / "awa-server-user.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:  # created while we waited for the lock
            return pwd.getpwnam(SERVER_USER), ""
        except KeyError:
            pass
        useradd = shutil.which("useradd")
        if useradd:
            subprocess.run(
                [
                    useradd,
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVER_USER,
                ],
                capture_output=True,
                check=False,
            )
            try:
                return pwd.getpwnam(SERVER_USER), " (created)"
            except KeyError:
                pass
    return pwd.getpwnam("nobody"), f" (user {SERVER_USER!r} could not be created)"


def can_traverse(path: Path, user: ServerUser) -> bool:
    st = path.stat()
    if st.st_uid == user.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == user.gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def ensure_traversable(
    path: Path, user: ServerUser, notice: Callable[[str], None] | None = None
) -> None:
    """Let ``user`` reach ``path``: add o+x to each ancestor it cannot traverse (and, with
    ``notice``, say so for each: a home directory made traversable is worth knowing)."""
    for parent in reversed(path.resolve().parents):
        if not can_traverse(parent, user):
            parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
            if notice is not None:
                notice(f"added o+x to {parent} (so that user {user.name!r} can reach {path})")


def ensure_readable_tree(root: Path) -> None:
    """o+rX on an install tree (pgserver's binaries and libraries) if it lacks it."""
    probe = root / "bin" / "postgres"
    if (
        probe.exists()
        and probe.stat().st_mode & stat.S_IXOTH
        and root.stat().st_mode & stat.S_IXOTH
    ):
        return
    for dirpath, _dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        d.chmod(d.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
        for name in filenames:
            f = d / name
            if f.is_symlink():
                continue
            mode = f.stat().st_mode | stat.S_IROTH
            if mode & stat.S_IXUSR:
                mode |= stat.S_IXOTH
            f.chmod(mode)
