"""Fixtures of the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest


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
