"""The exit codes of architecture §6 for config mistakes (D13): an ``[app] modules`` entry that
names nothing importable is a config error (2); a module that is found but raises is the
code's failure (1). Real `awa` processes; no database is reached (the errors come first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

AWA = str(Path(sys.executable).parent / "awa")
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/x"


def run(tmp_path: Path, modules: str, *argv: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "goodmod.py").write_text("import awa_cli as awa\n\napp = awa.App()\n")
    (tmp_path / "raisingmod.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "brokenimport.py").write_text("import no_such_dependency_awa\n")
    config = tmp_path / "awa.toml"
    config.write_text(f"[app]\nmodules = [{modules}]\n")
    env = {**os.environ, "NO_COLOR": "1"}
    for name in ("AWA_CONFIG", "AWA_DATABASE_URL"):
        env.pop(name, None)
    return subprocess.run(
        [AWA, "--config", str(config), "--database-url", UNREACHABLE, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("modules", "code", "needle"),
    [
        ('"no_such_module_awa"', 2, "no module named 'no_such_module_awa'"),
        ('"goodmod.nested"', 2, "no module named 'goodmod.nested'"),
        ('"goodmod:ap"', 2, "'goodmod' has no attribute 'ap'"),
        ('"raisingmod"', 1, "raised while importing: RuntimeError: boom at import"),
        ('"brokenimport"', 1, "cannot import 'brokenimport'"),
    ],
)
@pytest.mark.parametrize("argv", [["worker"], ["job", "enqueue", "k", "--args", "{}"]])
def test_app_modules_errors_exit_with_the_documented_code(
    tmp_path: Path, modules: str, code: int, needle: str, argv: list[str]
) -> None:
    done = run(tmp_path, modules, *argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and needle in lines[0], done.stderr
    assert lines[0].startswith("Error: [app] modules: ") and "Traceback" not in done.stderr
