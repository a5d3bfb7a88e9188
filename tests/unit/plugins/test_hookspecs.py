"""The plugin contract in ``awa_cli/plugins/hookspecs.py`` is documented, typed and exercised
(in the manner of datasette's ``test_docs.py``)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from awa_cli.plugins import hookspecs
from awa_cli.plugins.manager import HOOK_NAMES, build_plugin_host
from tests.helpers import TESTS


def hook_functions() -> list[tuple[str, Any]]:
    return [
        (name, fn)
        for name, fn in vars(hookspecs).items()
        if name.startswith("awa_") and inspect.isfunction(fn)
    ]


def test_the_contract_declares_the_documented_hooks() -> None:
    names = [name for name, _ in hook_functions()]
    assert {"awa_job_event", "awa_worker_started", "awa_worker_stopping"} <= set(names)
    assert tuple(names) == HOOK_NAMES
    pm = build_plugin_host(entry_points=False).pm
    for name in names:  # each is a registered pluggy hookspec
        assert getattr(pm.hook, name).spec is not None


def test_every_hook_is_prefixed() -> None:
    pm = build_plugin_host(entry_points=False).pm
    assert all(name.startswith("awa_") for name in vars(pm.hook) if not name.startswith("_"))


@pytest.mark.parametrize(("name", "fn"), hook_functions(), ids=[n for n, _ in hook_functions()])
def test_every_hook_is_documented(name: str, fn: Any) -> None:
    doc = inspect.getdoc(fn) or ""
    assert len(doc) > 80, f"{name} has no real docstring"
    assert re.search(r"\bfires?\b", doc, re.IGNORECASE), f"{name}: say when it fires"
    assert "transaction" in doc, f"{name}: say whether it runs inside a transaction"
    assert "async" in doc, f"{name}: say whether it may be async"
    assert re.search(r"return", doc, re.IGNORECASE), f"{name}: say what its return value means"


@pytest.mark.parametrize(("name", "fn"), hook_functions(), ids=[n for n, _ in hook_functions()])
def test_every_hook_is_typed(name: str, fn: Any) -> None:
    hints = get_type_hints(fn, globalns={**vars(hookspecs), **_runtime_types()})
    params = list(inspect.signature(fn).parameters)
    assert params and all(p in hints for p in params), f"{name}: untyped parameter"
    assert "return" in hints, f"{name}: no return annotation"


def _runtime_types() -> dict[str, Any]:
    from awa_cli.depth import QueueDepth
    from awa_cli.events import AnyEvent
    from awa_cli.worker.runtime import Worker

    return {"AnyEvent": AnyEvent, "Worker": Worker, "QueueDepth": QueueDepth}


def test_the_module_says_how_async_implementations_run() -> None:
    doc = hookspecs.__doc__ or ""
    assert "async" in doc and "thread" in doc and "transaction" in doc and "awa_cli.hookimpl" in doc


@pytest.mark.parametrize("name", [n for n, _ in hook_functions()])
def test_every_hook_is_exercised_by_a_test(name: str) -> None:
    """Each hook's name appears in a test module other than this one, which calls it through
    a worker or the plugin host."""
    using = [
        path.relative_to(TESTS)
        for path in TESTS.rglob("test_*.py")
        if path.resolve() != Path(__file__).resolve() and name in path.read_text(encoding="utf-8")
    ]
    assert using, f"no test exercises {name}"
