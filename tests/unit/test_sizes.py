"""No module of awa_cli over 600 lines and no function over 80 (architecture §1).

The generated sync client is measured too: it is read like any other module.
"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MODULES = sorted((ROOT / "awa_cli").rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_function_sizes(path) -> None:  # type: ignore[no-untyped-def]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []
