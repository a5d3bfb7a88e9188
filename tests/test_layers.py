"""The one-way layering of DESIGN §1, checked on the import statements of every module.

``commands → client/worker/maintenance → outcomes → db``; ``app``, ``jobs``, ``results`` and
``events`` import nothing of the project's I/O; ``db/`` never imports click or rich; only the
CLI layer talks to the terminal.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "awa_cli"
PURE = {
    "awa_cli.app",
    "awa_cli.jobs",
    "awa_cli.results",
    "awa_cli.events",
    "awa_cli.plugins.marker",
    "awa_cli.metadata",
}
CLI_LAYER_PREFIXES = ("awa_cli.commands", "awa_cli.cli", "awa_cli.terminal", "awa_cli.manpages")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module imported anywhere in the file (including lazy and TYPE_CHECKING imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def project_imports(name: str) -> set[str]:
    return {m for m in MODULES[name] if m.startswith("awa_cli.") and m in MODULES}


@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_modules_import_only_pure_modules(name: str) -> None:
    assert project_imports(name) <= PURE, name


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("awa_cli.db")))
def test_db_layer_is_the_bottom(name: str) -> None:
    third_party = {m.split(".")[0] for m in MODULES[name]}
    assert not third_party & {"click", "rich"}, name
    assert project_imports(name) <= PURE | {n for n in MODULES if n.startswith("awa_cli.db")}, name


def test_outcome_core_sits_below_clients_and_workers() -> None:
    above = (
        "awa_cli.client",
        "awa_cli.worker",
        "awa_cli.maintenance",
        "awa_cli.commands",
        "awa_cli.cli",
        "awa_cli.testing",
    )
    assert not {m for m in project_imports("awa_cli.outcomes") if m.startswith(above)}


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in MODULES
        if n.startswith(("awa_cli.client", "awa_cli.worker", "awa_cli.maintenance"))
    ),
)
def test_runtime_never_imports_the_cli(name: str) -> None:
    assert not {m for m in project_imports(name) if m.startswith(CLI_LAYER_PREFIXES)}, name


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_cli_layer_uses_click_and_rich(name: str) -> None:
    if name.startswith(CLI_LAYER_PREFIXES):
        return
    assert not {m.split(".")[0] for m in MODULES[name]} & {"click", "rich"}, name
