"""What the test apps share: the DDL of a side table they record executions in, and the args of
a numbered job that may sleep."""

from __future__ import annotations

from dataclasses import dataclass


def side_table(name: str, columns: str, at_default: str = "now()") -> str:
    """The DDL of ``awa_test.NAME`` (schema and table created if missing): ``columns`` (SQL
    column definitions), then ``at``, when the row was written (``at_default``)."""
    return (
        "CREATE SCHEMA IF NOT EXISTS awa_test;\n"
        f"CREATE TABLE IF NOT EXISTS awa_test.{name} (\n"
        f"    {columns},\n"
        f"    at timestamptz NOT NULL DEFAULT {at_default})\n"
    )


@dataclass
class NumberedJob:
    """Args of a job that is the ``n``-th of its test and sleeps ``sleep`` seconds."""

    n: int
    sleep: float = 0.0
