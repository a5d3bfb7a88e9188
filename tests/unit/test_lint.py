"""ruff stays clean under the project's configuration (pyproject.toml, [tool.ruff.lint])."""

from __future__ import annotations

import sys
from tests.helpers import run_captured


def test_ruff_is_clean() -> None:
    done = run_captured(
        [sys.executable, "-m", "ruff", "check", "awa_cli", "benchmarks", "tests", "examples"],
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_clean() -> None:
    """The layout CONTRIBUTING asks for: ``ruff format --check`` finds nothing to change."""
    done = run_captured([sys.executable, "-m", "ruff", "format", "--check", "."], timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_strict_is_clean() -> None:
    """mypy in the strict mode configured in pyproject.toml ([tool.mypy])."""
    done = run_captured([sys.executable, "-m", "mypy", "awa_cli"], timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
