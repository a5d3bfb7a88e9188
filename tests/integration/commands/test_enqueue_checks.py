"""`awa job enqueue` with an app loaded (architecture §15.5, D3, D5, D12): a kind the app does not
register and args that do not rebuild as the registered type are refused (exit 2, one line
naming the kind or the field, nothing written); --force skips both checks; a queue no config
table names is enqueued with a warning. Real `awa` processes against a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.integration

AWA = str(Path(sys.executable).parent / "awa")
MODULE = """
from dataclasses import dataclass

import awa_cli as awa

app = awa.App()


@dataclass
class SendEmail:
    to: str
    subject: str = ""


@dataclass
class Pair:
    a: int
    b: int


@app.task(SendEmail, queue="email")
def send_email(job): ...


@app.task(Pair)
def pair(job): ...


@app.task(dict, kind="free_form")
def free_form(job): ...
"""


@pytest.fixture
def awa(tmp_path: Path, dsn: str):  # type: ignore[no-untyped-def]
    (tmp_path / "mailapp.py").write_text(MODULE)
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["mailapp"]\n[queues.default]\nconcurrency = 2\n'
        "[queues.email]\nconcurrency = 2\n"
    )
    env = {**os.environ, "NO_COLOR": "1"}
    for name in ("AWA_CONFIG", "AWA_DATABASE_URL"):
        env.pop(name, None)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AWA, "--config", str(config), "--database-url", dsn, "job", "enqueue", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=30,
        )

    return run


def jobs(db: psycopg.Connection) -> list[tuple[str, str]]:
    return db.execute("SELECT kind, queue FROM awa.jobs ORDER BY id").fetchall()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["sned_email", "--args", '{"to": "x"}'],
            "Error: kind: 'sned_email' is not registered in the loaded app "
            "(registered: free_form, pair, send_email); use --force to enqueue it anyway",
        ),
        (["send_email", "--args", "{}"], "Error: --args: SendEmail: missing field 'to'"),
        (
            ["send_email", "--args", '{"too": "x"}'],
            "Error: --args: SendEmail: unknown field 'too'",
        ),
        (["pair", "--args", "{}"], "Error: --args: Pair: missing fields 'a', 'b'"),
    ],
)
def test_refused_with_one_line_and_nothing_written(
    awa, db: psycopg.Connection, argv: list[str], line: str
) -> None:  # type: ignore[no-untyped-def]
    done = awa(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [line]
    assert done.stdout == "" and jobs(db) == []


def test_registered_kind_with_fitting_args_goes_to_its_queue(awa, db: psycopg.Connection) -> None:  # type: ignore[no-untyped-def]
    done = awa("send_email", "--args", '{"to": "a@example.org"}', "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queue"] == "email"
    assert "warning" not in done.stderr
    assert awa("free_form", "--args", '{"anything": 1}').returncode == 0
    assert jobs(db) == [("send_email", "email"), ("free_form", "default")]


def test_force_skips_both_checks(awa, db: psycopg.Connection) -> None:  # type: ignore[no-untyped-def]
    assert awa("sned_email", "--args", '{"to": "x"}', "--force").returncode == 0
    assert awa("send_email", "--args", "{}", "--force").returncode == 0
    assert jobs(db) == [("sned_email", "default"), ("send_email", "email")]


def test_a_queue_no_config_table_names_is_enqueued_with_a_warning(
    awa, db: psycopg.Connection
) -> None:  # type: ignore[no-untyped-def]
    done = awa("send_email", "--args", '{"to": "x"}', "--queue", "emial")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "'emial' is not configured" in warnings[0], done.stderr
    assert "did you mean 'email'?" in warnings[0]  # D24
    assert jobs(db) == [("send_email", "emial")]
    far = awa("send_email", "--args", '{"to": "x"}', "--queue", "zzz")
    [line] = [line for line in far.stderr.splitlines() if line.startswith("warning:")]
    assert "did you mean" not in line
