"""The one-way layering of DESIGN §1, checked by import-linter.

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
