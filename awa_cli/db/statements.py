"""Every SQL statement awa runs, loaded by name from the ``.sql`` files beside this module.

Each file in ``awa_cli/db/sql/`` holds named blocks::

    -- name: claim_by_queue
    -- What the statement does and why it is shaped so (any number of comment lines).
    UPDATE awa.jobs ...

A block starts at a ``-- name: <identifier>`` line and runs to the next one (or the end of
the file). A ``-- fragment: <identifier>`` block is a piece of SQL that statements of any file
include as ``{{identifier}}`` (a shared RETURNING list, the start of an attempt): one text for
what several statements must do alike, substituted when the files are loaded; a fragment is
not a statement of its own. Parameters are always named (``%(name)s``); values are never formatted into the
text, and identifiers, where one must vary, are composed with ``psycopg.sql`` by the caller.
Names are unique across all files; the loader refuses a duplicate or an empty block, so a
typo fails at import rather than at the first call.

Use: ``from awa_cli.db.statements import SQL`` then ``cur.execute(SQL["claim_by_queue"], params)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any, LiteralString

from psycopg.rows import dict_row

if TYPE_CHECKING:
    import psycopg

_NAME = re.compile(r"^--\s*(name|fragment):\s*([a-z][a-z0-9_]*)\s*$")
_INCLUDE = re.compile(r"\{\{([a-z][a-z0-9_]*)\}\}")
FRAGMENT = "fragment:"  # the key prefix parse() gives fragments


class Statements(Mapping[str, LiteralString]):
    """A read-only mapping of statement name to SQL text, with a clear error for a bad name."""

    def __init__(self, texts: dict[str, LiteralString], origins: dict[str, str]) -> None:
        self._texts = texts
        self._origins = origins

    def __getitem__(self, name: str) -> LiteralString:
        try:
            return self._texts[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r} in awa_cli/db/sql/") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def origin(self, name: str) -> str:
        """The file a statement was loaded from (for error messages and docs)."""
        return self._origins[name]


def parse(text: str, origin: str) -> dict[str, str]:
    """Split one file's text into its named blocks (exposed for the loader's tests)."""
    blocks: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is None:
            return
        body = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        # a fragment keeps its first line's indentation: it is pasted into a statement
        body = body.strip("\n").rstrip() if name.startswith(FRAGMENT) else body.strip()
        if not body:
            raise ValueError(f"{origin}: statement {name!r} is empty")
        blocks[name] = body.rstrip(";").rstrip()

    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            close()
            name = match.group(2) if match.group(1) == "name" else FRAGMENT + match.group(2)
            if name in blocks:
                raise ValueError(f"{origin}: statement {name!r} is defined twice")
            lines = []
        elif name is not None:
            lines.append(line)
        elif line.strip() and not line.lstrip().startswith("--"):
            raise ValueError(f"{origin}: SQL before the first '-- name:' line")
    close()
    return blocks


def include(texts: dict[str, str], fragments: dict[str, str]) -> dict[str, str]:
    """Each ``{{fragment}}`` of ``texts`` replaced by its text (fragments may include others)."""

    def expand(body: str, seen: tuple[str, ...]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in seen:
                raise ValueError(f"fragment {name!r} includes itself")
            if name not in fragments:
                raise ValueError(f"no SQL fragment named {name!r}")
            return expand(fragments[name], (*seen, name))

        return _INCLUDE.sub(one, body)

    return {name: expand(body, ()) for name, body in texts.items()}


def load() -> Statements:
    texts: dict[str, LiteralString] = {}
    origins: dict[str, str] = {}
    fragments: dict[str, str] = {}
    folder = resources.files("awa_cli.db").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse(entry.read_text(encoding="utf-8"), entry.name).items():
            if name.startswith(FRAGMENT):
                if name in fragments:
                    raise ValueError(f"{entry.name}: {name!r} is defined twice")
                fragments[name.removeprefix(FRAGMENT)] = body
                continue
            if name in texts:
                raise ValueError(
                    f"{entry.name}: statement {name!r} is also defined in {origins[name]}"
                )
            # The text comes from files shipped in the package, never from input (mypy reads
            # LiteralString as str, so no cast is needed for it; pyright would want one).
            texts[name] = body
            origins[name] = entry.name
    # The fragments come from the same shipped files: the result is as literal as they are.
    return Statements(include(texts, fragments), origins)


SQL: Statements = load()


async def head_and_rows(
    conn: psycopg.AsyncConnection[Any],
    head: str,
    rows: str,
    params: Mapping[str, Any],
    missing: Exception,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one row of statement ``head`` (a batch, a workflow; ``missing`` is raised when
    there is none) and the rows of statement ``rows`` (its members, its steps), both with
    ``params``, on one cursor, as dicts."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL[head], params)
        record = await cur.fetchone()
        if record is None:
            raise missing
        await cur.execute(SQL[rows], params)
        return record, await cur.fetchall()
