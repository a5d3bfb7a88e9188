"""ruff stays clean under the project's configuration (pyproject.toml, [tool.ruff.lint])."""

from __future__ import annotations

import subprocess
import sys
from tests.helpers import ROOT


def test_ruff_is_clean() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "awa_cli", "benchmarks", "tests", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_clean() -> None:
    """The layout CONTRIBUTING asks for: ``ruff format --check`` finds nothing to change."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_strict_is_clean() -> None:
    """mypy in the strict mode configured in pyproject.toml ([tool.mypy])."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "awa_cli"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
