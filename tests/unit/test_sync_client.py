"""The synchronous Client keeps in step with AsyncClient: one typed twin per public method."""

from __future__ import annotations

import ast
import subprocess
import sys
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from awa_cli.client import AsyncClient
from awa_cli.sync_client import Client
from tests.helpers import ROOT

# The context-manager protocols differ by nature; everything else has a twin.
ASYNC_ONLY = {"__aenter__", "__aexit__"}
SYNC_ONLY = {"__enter__", "__exit__", "call"}
# A method returning a context manager returns the sync twin of the async one.
CONTEXT_MANAGERS = {"batch": ("BatchWriter", "SyncBatchWriter")}


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    """Public methods of ``cls`` (its own and the functions its body binds) and of its bases,
    nearest definition first."""
    found: dict[str, Callable[..., Any]] = {}
    for klass in cls.__mro__[:-1]:  # not object
        for name, member in vars(klass).items():
            if callable(member) and (not name.startswith("_") or name == "__init__"):
                found.setdefault(name, member)
    return found


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
        # the receiver: a function bound into AsyncClient types it (self: AsyncClient)
        (a_self, *a_rest), (s_self, *s_rest) = a.parameters.values(), s.parameters.values()
        assert a_self.name == s_self.name == "self", name
        assert s_rest == a_rest, name
        if name in CONTEXT_MANAGERS:
            assert (a.return_annotation, s.return_annotation) == CONTEXT_MANAGERS[name]
            continue
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


def test_the_generated_sync_client_is_current() -> None:
    """``awa_cli/sync_client.py`` is what ``tools/gen_sync.py`` writes from AsyncClient today."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_sync.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
