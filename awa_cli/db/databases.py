"""Whole databases on a server (statements in ``sql/testing.sql``): the test fixtures' migrated
template and its per-test clones. Synchronous, on an autocommit connection of their own
(``CREATE DATABASE`` cannot run inside a transaction)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from awa_cli.db.statements import SQL


def _run(url: str, statement: sql.Composed) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def create(url: str, name: str) -> None:
    """An empty database ``name`` on the server of ``url``."""
    _run(url, sql.SQL(SQL["create_database"]).format(sql.Identifier(name)))


def clone(url: str, name: str, template: str) -> None:
    """A database ``name`` copied from ``template`` (no one may be connected to it)."""
    _run(
        url,
        sql.SQL(SQL["create_database_from_template"]).format(
            sql.Identifier(name), sql.Identifier(template)
        ),
    )


def drop(url: str, name: str) -> None:
    """Drop ``name`` if it exists, even with connections left open to it."""
    _run(url, sql.SQL(SQL["drop_database"]).format(sql.Identifier(name)))
