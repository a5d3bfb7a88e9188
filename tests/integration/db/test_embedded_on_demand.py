"""Only `awa db start` starts a stopped embedded server; nothing creates one in a directory
without awa.toml but `awa db start` and `awa migrate` (issue 27 D25, D29).

D29 was no race: a command run outside the app's directory found no awa.toml, created and
started an empty embedded server in ./.awa and then reported "awa schema not found: run awa
migrate" (about that new, empty server). Now such a command exits 1 with one line saying
that no database is configured there, and leaves nothing behind."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from awa_cli.db.embedded import EmbeddedPostgres
from tests.helpers import AwaRunner

pytestmark = pytest.mark.integration

NO_ENV: dict[str, str | None] = {"AWA_DATABASE_URL": None, "AWA_CONFIG": None}


def awa(*args: str) -> tuple[int, str]:
    result = AwaRunner().awa(*args, env=NO_ENV)
    return result.exit_code, result.stderr


def test_a_command_without_awa_toml_creates_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["doctor"], ["job", "show", "1"], ["queue", "stats"], ["serve"]):
        code, err = awa(*command)
        assert code == 1, (command, err)
        [line] = err.strip().splitlines()
        assert f"no awa.toml in {tmp_path}" in line and "awa db start" in line, line
        assert "schema not found" not in line
    assert not (tmp_path / ".awa").exists() and not (tmp_path / ".awa.lock").exists()


def test_only_db_start_starts_a_stopped_server(tmp_path: Path) -> None:
    # Outside pytest's base temp dir: under root, the server user must traverse its parents,
    # and a concurrent pytest session resets that dir to 0700.
    scratch = Path(tempfile.mkdtemp(prefix="awa-d25-"))
    data_dir = scratch / "pgdata"
    config = tmp_path / "awa.toml"
    config.write_text(f'[database]\nembedded_dir = "{data_dir}"\n', encoding="utf-8")
    server = EmbeddedPostgres(data_dir)
    try:
        code, err = awa("--config", str(config), "migrate")  # the quick start creates it
        assert code == 0, err
        assert server.status().running
        assert awa("--config", str(config), "db", "stop")[0] == 0
        for command in (["doctor"], ["migrate"], ["queue", "stats"], ["job", "show", "1"]):
            code, err = awa("--config", str(config), *command)
            assert code == 1, (command, err)
            [line] = err.strip().splitlines()
            assert f"embedded PostgreSQL server in {data_dir} is stopped" in line, line
            assert "awa db start" in line
            assert not server.status().running, command
        assert awa("--config", str(config), "db", "start")[0] == 0
        code, err = awa("--config", str(config), "queue", "stats")
        assert code == 0, err
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
