"""awa.toml's dead-letter keys: [queues.NAME] dead_letter, [dead_letter] default,
[maintenance] dead_letter_retention, and dead_letter_enabled() (no database). Their errors
are rows of test_config.py's test_errors_name_the_key."""

from __future__ import annotations

from pathlib import Path

import pytest

from awa_cli.config import (
    Config,
    DeadLetterConfig,
    QueueConfig,
    dead_letter_enabled,
    load_config,
)
from tests.helpers import ROOT

EXAMPLE = ROOT / "awa.toml.example"
# One queue that dead-letters, one that does not, one that leaves it to [dead_letter] default.
THREE_QUEUES = """
[queues.email]
dead_letter = true
[queues.bulk]
dead_letter = false
[queues.plain]
"""


def load_text(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "awa.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, explicit=True)


def test_defaults_are_off_and_thirty_days(tmp_path: Path) -> None:
    config = load_text(tmp_path, "")
    assert config.dead_letter == DeadLetterConfig(default=False)
    assert config.queues["default"].dead_letter is None
    assert config.maintenance.dead_letter_retention == 30 * 86400.0
    assert not dead_letter_enabled(config, "default")
    assert not dead_letter_enabled(config, "anything")


def test_values_are_read(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        THREE_QUEUES
        + '[dead_letter]\ndefault = true\n[maintenance]\ndead_letter_retention = "7d"\n',
    )
    assert config.queues["email"] == QueueConfig(dead_letter=True)
    assert config.queues["bulk"].dead_letter is False
    assert config.queues["plain"].dead_letter is None
    assert config.dead_letter.default is True
    assert config.maintenance.dead_letter_retention == 7 * 86400.0


@pytest.mark.parametrize(
    ("default", "queue", "expected"),
    [
        (False, "email", True),  # the queue's own true wins
        (True, "bulk", False),  # the queue's own false wins over the default
        (True, "plain", True),  # unset: the default
        (False, "plain", False),
        (True, "unconfigured", True),  # a queue the config does not name: the default
        (False, "unconfigured", False),
    ],
)
def test_dead_letter_enabled(tmp_path: Path, default: bool, queue: str, expected: bool) -> None:
    config = load_text(
        tmp_path, THREE_QUEUES + f"[dead_letter]\ndefault = {str(default).lower()}\n"
    )
    assert dead_letter_enabled(config, queue) is expected


def test_example_turns_it_on_for_one_queue() -> None:
    config = load_config(EXAMPLE, explicit=True)
    assert dead_letter_enabled(config, "email")
    assert not dead_letter_enabled(config, "default")
    assert config.maintenance.dead_letter_retention == 30 * 86400.0


def test_display_dict_shows_the_keys(tmp_path: Path) -> None:
    display = load_text(tmp_path, "[dead_letter]\ndefault = true").to_display_dict(
        human_durations=True
    )
    assert display["dead_letter"] == {"default": True}
    assert display["maintenance"]["dead_letter_retention"] == "30d"
    assert display["queues"]["default"]["dead_letter"] is None
