"""Usage errors are one line on stderr with exit code 2 (architecture §6), in-process and for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import AwaRunner

from awa_cli.cli import cli

CASES = [
    (["job", "enqueue", "k", "--priority", "abc"], "'--priority'"),
    (["no-such-command"], "No such command"),
    (["job", "show"], "Missing argument"),
    (["worker", "--processes", "0"], "--processes"),
    # the insert validator's rules (D12): a name no job could have is refused at once
    (["worker", "--queue", "q" * 201], "--queue: queue name longer than 200 characters"),
    (["worker", "--queue", "a\x00b=2"], "--queue: queue name contains a NUL character"),
    (["worker", "--processes", "2", "--queue", "q" * 201], "--queue"),
    (["job", "enqueue", "k", "--priority", "1\x852\u20283"], "'--priority'"),  # line breaks escaped
]


@pytest.mark.parametrize(("args", "needle"), CASES)
def test_usage_errors_are_one_line(args: list[str], needle: str, tmp_path: Path) -> None:
    config = tmp_path / "awa.toml"
    config.write_text("")
    result = AwaRunner().invoke(cli, ["--config", str(config), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0]
    assert "--help" in lines[0]


def test_usage_error_from_the_real_console_script() -> None:
    awa = str(Path(sys.executable).parent / "awa")
    done = subprocess.run(
        [awa, "job", "enqueue", "k", "--priority", "abc"],
        capture_output=True,
        text=True,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
