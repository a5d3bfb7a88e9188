"""The one-way layering of architecture §1, checked by import-linter.

The contracts are in pyproject.toml (``[tool.importlinter]``): ``commands, serve →
client/worker → maintenance → outcomes → db → the pure floor``; the pure modules import no
I/O library; ``db/`` never imports click, rich or starlette; only the CLI layer uses click and
rich. Run them by hand with ``.venv/bin/lint-imports``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from tests.helpers import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_linter_contracts_are_kept() -> None:
    assert LINT_IMPORTS.exists(), "install the test extra: pip install -e '.[test]'"
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    summary = re.search(r"Contracts: (\d+) kept, (\d+) broken", done.stdout)
    assert summary is not None, done.stdout[-2000:]
    assert (int(summary[1]), int(summary[2])) == (len(contracts), 0)  # every contract ran


def _layer_members(layers: list[str]) -> set[str]:
    members = set()
    for layer in layers:
        for name in re.split(r"[|:]", layer):
            members.add(name.strip().strip("()").strip())
    return members


def test_every_module_sits_in_a_layer() -> None:
    """A module outside every layer escapes the one-way check: each top-level module and
    package of awa_cli is named in the layers contract (a new one must be placed)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and "containers" not in c
    )
    members = _layer_members(contract["layers"])
    package = ROOT / "awa_cli"
    modules = {
        f"awa_cli.{path.stem}" for path in package.glob("*.py") if path.name != "__init__.py"
    } | {f"awa_cli.{path.parent.name}" for path in package.glob("*/__init__.py")}
    unplaced = sorted(modules - members)
    assert not unplaced, f"modules in no layer of pyproject.toml's layers contract: {unplaced}"
