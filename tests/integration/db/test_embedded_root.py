"""Running as root, the embedded server says what it does to the system (D9): which system
user it runs as, and each directory it made traversable. Once, on stderr, at the start that
did it; nothing on a start that finds the server running. A real `awa db start`."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="only meaningful when run as root"),
]

AWA = str(Path(sys.executable).parent / "awa")


def test_as_root_the_server_user_and_each_loosened_directory_are_printed_once(
    tmp_path: Path,
) -> None:
    private = tmp_path / "home-like"
    private.mkdir(mode=0o700)
    private.chmod(0o700)  # as a home directory under /root is
    data_dir = private / "project" / ".awa"
    config = tmp_path / "awa.toml"
    config.write_text(f'[database]\nembedded_dir = "{data_dir}"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("AWA_DATABASE_URL", "AWA_CONFIG")}

    def awa(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AWA, "--config", str(config), *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    try:
        first = awa("db", "start")
        assert first.returncode == 0, first.stderr
        lines = first.stderr.splitlines()
        said = [line for line in lines if line.startswith("running as root:")]
        assert len(said) == 1 and said[0].startswith(
            "running as root: the server runs as system user 'awa'"
        ), first.stderr
        loosened = [line for line in lines if line.startswith("added o+x to ")]
        assert f"added o+x to {private} (so that user 'awa' can reach {data_dir})" in loosened
        assert len(loosened) == len(set(loosened))  # each directory once
        assert private.stat().st_mode & stat.S_IXOTH  # what it said it did, it did
        again = awa("db", "start")  # already running: nothing done, nothing said
        assert again.returncode == 0, again.stderr
        assert "running as root" not in again.stderr and "added o+x" not in again.stderr
    finally:
        awa("db", "stop")


def test_concurrent_first_starts_agree_on_one_server_user() -> None:
    """Parallel first starts as root (pytest-xdist workers, two `awa db start`) each found no
    user and each ran useradd: every run exited 0, one was handed a uid that the next write of
    /etc/passwd removed, and its initdb failed ("could not look up effective user ID 999").
    Creation is serialised; each process gets the uid that stays. (A user of its own name, so
    the suite's own server user is never removed.)"""
    if not shutil.which("useradd") or not shutil.which("userdel"):
        pytest.skip("no useradd/userdel here")
    name = f"awa-race-{os.getpid()}"
    code = (
        "import pwd; from awa_cli.db import server_user as s; "
        f"s.SERVER_USER = {name!r}; u = s.server_user(); "
        "print(u.uid, pwd.getpwuid(u.uid).pw_name)"
    )
    try:
        runs = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        seen = {run.communicate(timeout=60)[0].strip() for run in runs}
        uid = pwd.getpwnam(name).pw_uid
        assert seen == {f"{uid} {name}"}, seen
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
