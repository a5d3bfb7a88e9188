"""One home for SQL: every statement lives in ``awa_cli/db/sql/*.sql`` (architecture §1).

No module outside ``awa_cli/db/`` holds SQL text (docstrings aside), every named statement is
used somewhere, and the statements that return a job row list its columns in the order
``JobRow.from_values`` reads them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from awa_cli.db.statements import SQL, parse
from awa_cli.jobs import INSERTED_COLUMNS, JOB_COLUMNS
from tests.helpers import ROOT

PACKAGE = ROOT / "awa_cli"

# Statement shapes, in the upper case the project writes SQL in (prose rarely matches).
SQL_PATTERNS = [
    re.compile(p)
    for p in (
        r"\bSELECT\b[\s\S]*\bFROM\b",
        r"\bSELECT\s+(1|pg_\w+)\b",
        r"\bUPDATE\s+awa\.",
        r"\bINSERT\s+INTO\b",
        r"\bDELETE\s+FROM\b",
        r"pg_advisory",
        r"pg_notify",
        r"^\s*(LISTEN|NOTIFY|UNLISTEN)\s",
        r"\bCOPY\s+[\w.]+\s*\(",
        r"\b(CREATE|DROP|ALTER)\s+(DATABASE|TABLE|SCHEMA|INDEX|FUNCTION)\b",
        r"\bRETURNING\b",
    )
]

EXEMPT: set[str] = set()  # no module outside db/ may hold SQL


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (module, class, function)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(path: Path) -> list[str]:
    """The string literals of a module (f-string parts included) that look like SQL."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in skip:
            continue
        if any(p.search(node.value) for p in SQL_PATTERNS):
            hits.append(node.value.strip()[:80])
    return hits


OUTSIDE_DB = sorted(
    str(p.relative_to(PACKAGE))
    for p in PACKAGE.rglob("*.py")
    if p.relative_to(PACKAGE).parts[0] != "db"
)


@pytest.mark.parametrize("module", OUTSIDE_DB)
def test_no_module_outside_db_holds_sql(module: str) -> None:
    if module in EXEMPT:
        return
    hits = sql_literals(PACKAGE / module)
    assert not hits, f"awa_cli/{module} holds SQL (move it to awa_cli/db/sql/): {hits}"


@pytest.mark.parametrize(
    "module", sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "db").rglob("*.py"))
)
def test_db_modules_hold_no_sql_text_either(module: str) -> None:
    """The statements are in the .sql files; the db/ modules only load and run them."""
    assert not sql_literals(PACKAGE / module), module


def test_the_scan_finds_sql(tmp_path: Path) -> None:
    """The check above can fail: it sees statements in a module, f-strings included, and
    skips only docstrings."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""SELECT a FROM b"""\nQ = "UPDATE awa.jobs SET x = 1"\nR = f"SELECT id FROM {Q}"\n'
    )
    assert sorted(sql_literals(sample)) == ["SELECT id FROM", "UPDATE awa.jobs SET x = 1"]


def _python_sources() -> str:
    return "\n".join(
        p.read_text() for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "sql"
    )


@pytest.mark.parametrize("name", sorted(SQL))
def test_every_statement_is_used(name: str) -> None:
    sources = _python_sources()
    assert f'"{name}"' in sources or f"'{name}'" in sources, (
        f"{name} ({SQL.origin(name)}) is dead SQL"
    )


@pytest.mark.parametrize("name", ["claim_by_queue", "claim_by_kind"])
def test_job_rows_come_back_in_field_order(name: str) -> None:
    flat = " ".join(SQL[name].split())
    assert f"RETURNING {JOB_COLUMNS}" in flat, name


def test_an_insert_returns_only_what_the_server_chose() -> None:
    """JobRow.inserted unpacks these four, in this order; the rest it knows."""
    flat = " ".join(SQL["insert_one"].split())
    assert flat.endswith("RETURNING " + ", ".join(f"j.{c}" for c in INSERTED_COLUMNS))


def test_the_claim_is_one_statement() -> None:
    for name in ("claim_by_queue", "claim_by_kind"):
        assert ";" not in SQL[name]


def test_placeholders_are_named() -> None:
    for name, text in SQL.items():
        assert not re.search(r"%s\b", text), f"{name} has a positional placeholder"


def test_the_loader_refuses_a_duplicate_or_an_empty_block() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "x.sql")
    with pytest.raises(ValueError, match="is empty"):
        parse("-- name: a\n-- only a comment\n", "x.sql")
    with pytest.raises(ValueError, match="before the first"):
        parse("SELECT 1;\n-- name: a\nSELECT 2;\n", "x.sql")
    assert parse("-- header\n\n-- name: a\n-- what it does\nSELECT 1;\n", "x.sql") == {
        "a": "SELECT 1"
    }


# Modules outside db/ and outcomes/ that still run named statements themselves: none any
# more (every read and write goes through a db/ gateway or the outcome core,
# docs/architecture.md, "The layers"); a module that loads the statements fails below.
LOADS_STATEMENTS_STILL: set[str] = set()
_LOADS = re.compile(r"^\s*from awa_cli\.db\.statements import|awa_cli\.db\.statements\b", re.M)


def test_only_db_and_outcomes_run_named_statements() -> None:
    """Reads and writes go through db/ gateways (and writes through the outcome core): no
    other module imports the statement catalogue."""
    loading = {
        module
        for module in OUTSIDE_DB
        if Path(module).parts[0] != "outcomes" and _LOADS.search((PACKAGE / module).read_text())
    }
    assert loading <= LOADS_STATEMENTS_STILL, sorted(loading - LOADS_STATEMENTS_STILL)
    moved = LOADS_STATEMENTS_STILL - loading
    assert not moved, f"these no longer load statements: drop them from the list {sorted(moved)}"


def test_fragments_are_included_and_checked() -> None:
    """``-- fragment:`` blocks are substituted for ``{{name}}`` and are not statements."""
    from awa_cli.db.statements import FRAGMENT, include

    blocks = parse("-- fragment: cols\nid, kind\n-- name: a\nSELECT {{cols}} FROM t;\n", "x.sql")
    fragments = {k.removeprefix(FRAGMENT): v for k, v in blocks.items() if k.startswith(FRAGMENT)}
    assert include({"a": blocks["a"]}, fragments) == {"a": "SELECT id, kind FROM t"}
    with pytest.raises(ValueError, match="no SQL fragment named 'nope'"):
        include({"a": "SELECT {{nope}}"}, fragments)
    with pytest.raises(ValueError, match="includes itself"):
        include({"a": "{{loop}}"}, {"loop": "x {{loop}}"})
    assert not [name for name in SQL if "{{" in SQL[name]]
    assert "start_attempts" not in SQL
