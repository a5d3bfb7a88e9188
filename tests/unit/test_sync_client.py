"""The synchronous Client keeps in step with AsyncClient: one typed twin per public method."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from awa_cli.client import AsyncClient
from awa_cli.client_ops import OperatorMethods
from awa_cli.sync_client import Client

# The context-manager protocols differ by nature. ``ensure_open`` (opening the pool on the
# client's own loop) is package-internal: code built on the sync client runs such coroutines
# on its loop with ``Client.call``.
ASYNC_ONLY = {"__aenter__", "__aexit__", "ensure_open"}
SYNC_ONLY = {"__enter__", "__exit__", "call"}


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    # AsyncClient's operator methods live in a mixin of the client layer (client_ops.py)
    members = {**vars(OperatorMethods), **vars(cls)} if cls is AsyncClient else vars(cls)
    return {
        name: member
        for name, member in members.items()
        if callable(member) and (not name.startswith("_") or name == "__init__")
    }


def test_every_public_async_method_has_a_sync_twin() -> None:
    async_methods = set(_public(AsyncClient)) - ASYNC_ONLY
    sync_methods = set(_public(Client)) - SYNC_ONLY
    assert len(async_methods) >= 15  # the scan saw the methods, not an empty set
    assert sorted(async_methods - sync_methods) == [], "AsyncClient methods without a Client twin"
    assert sorted(sync_methods - async_methods) == [], "Client methods AsyncClient does not have"


def test_parameters_and_return_types_match() -> None:
    for name, method in _public(AsyncClient).items():
        if name in ASYNC_ONLY:
            continue
        a = inspect.signature(method)
        s = inspect.signature(getattr(Client, name))
        assert list(s.parameters.values()) == list(a.parameters.values()), name
        assert s.return_annotation == a.return_annotation, name


def test_public_attributes_are_properties_of_the_sync_client() -> None:
    client = AsyncClient("postgresql://unused@127.0.0.1:1/unused")  # the pool is not opened
    attributes = {n for n in vars(client) if not n.startswith("_")}
    assert attributes == {"dsn", "app", "dispatcher", "core"}
    for name in attributes:
        assert isinstance(inspect.getattr_static(Client, name), property), name


def test_each_twin_runs_the_async_method_of_its_own_name() -> None:
    for name in set(_public(AsyncClient)) - ASYNC_ONLY - {"__init__"}:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(Client, name))))
        called = {
            node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "_async"
        }
        assert called == {name}, name


def test_the_sync_client_has_no_catch_all_forwarding() -> None:
    assert "__getattr__" not in vars(Client)
