"""An `awa.Client` left open at interpreter exit closes quietly (trial D21: "Task was
destroyed but it is pending!" three times at exit)."""

from __future__ import annotations


import pytest

from tests.helpers import run_python

pytestmark = [pytest.mark.integration]

SCRIPT = """
import sys
import awa_cli as awa

client = awa.Client(sys.argv[1])
client.insert({"n": 1}, kind="ping")
client.list_jobs(limit=5)
print("done", flush=True)
# no close(): the interpreter exits with the client open
"""


def test_an_unclosed_client_exits_quietly(dsn: str) -> None:
    done = run_python("-X", "dev", "-c", SCRIPT, dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert "Task was destroyed" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
