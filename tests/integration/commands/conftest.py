"""Fixtures of the CLI tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.helpers import AwaRunner


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    """A minimal awa.toml (no database URL: the tests pass one, or test its absence)."""
    path = tmp_path / "awa.toml"
    path.write_text("[worker]\nprocesses = 1\n", encoding="utf-8")
    return path


@pytest.fixture
def callbacks_config(tmp_path: Path) -> Path:
    """An awa.toml that loads tests.apps.callbacks as the app and as a plugin."""
    path = tmp_path / "awa.toml"
    path.write_text(
        '[app]\nmodules = ["tests.apps.callbacks"]\nplugins = ["tests.apps.callbacks"]\n'
    )
    return path


@pytest.fixture
def awa(dsn: str, config_file: Path, runner: AwaRunner) -> Any:
    """Run `awa --config <tmp> --database-url <dsn> ARGS...` in-process."""

    def run(*args: str, database_url: str | None = None) -> Result:
        return runner.awa(
            "--config", str(config_file), "--database-url", database_url or dsn, *args
        )

    return run
