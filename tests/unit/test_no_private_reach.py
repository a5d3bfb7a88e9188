"""No module of awa_cli reads another object's or module's ``_private`` names (issue 15, item 4).

The protocol between parts is public and documented (``Job.finish()``, ``JobControl``,
``Worker.stats()``, ``AsyncClient.pool`` ...); an underscore name is private to the object
that owns it, so only ``self``/``cls`` may reach it.
"""

from __future__ import annotations

import ast

import pytest
from tests.helpers import ROOT

PACKAGE = ROOT / "awa_cli"
MODULES = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def private_reaches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__") and node.attr.endswith("__"):
                continue  # dunders are the language's protocol
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("awa_cli"):
            found += [
                f"line {node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return found


@pytest.mark.parametrize("module", MODULES)
def test_no_private_names_read_across_objects(module: str) -> None:
    assert private_reaches((PACKAGE / module).read_text(encoding="utf-8")) == [], module


def test_the_check_finds_a_reach() -> None:
    sample = "def f(job, self):\n    job._cancel()\n    self._ok()\n    x.__class__\n"
    assert private_reaches(sample) == ["line 2: job._cancel"]
