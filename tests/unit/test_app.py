"""Unit tests of the App registry and ``awa_cli.loading.load_apps`` (no database)."""

from __future__ import annotations

import itertools
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.errors import AppNotFound, RegistrationError
from awa_cli.loading import load_apps
from awa_cli.results import AwaError


@dataclass
class SendEmail:
    to: str


@dataclass
class SMTPPing:
    host: str = "localhost"


# -- tasks -------------------------------------------------------------------------------
def test_task_registers_the_derived_kind_and_returns_the_function_unchanged() -> None:
    app = awa.App()

    async def send(job: awa.Job) -> None: ...

    decorated = app.task(SendEmail, queue="email")(send)
    assert decorated is send
    task = app.tasks["send_email"]
    assert (
        task.fn is send and task.args_type is SendEmail and task.queue == "email" and task.is_async
    )
    assert app.queue_for("send_email") == "email" and app.args_type_for("send_email") is SendEmail


def test_plain_def_handlers_are_registered_as_sync() -> None:
    app = awa.App()

    @app.task(SMTPPing)
    def ping(job: awa.Job) -> None: ...

    assert app.tasks["smtp_ping"].is_async is False and app.tasks["smtp_ping"].queue is None


def test_kind_override() -> None:
    app = awa.App()

    @app.task(SendEmail, kind="mail.send")
    async def send(job: awa.Job) -> None: ...

    assert list(app.tasks) == ["mail.send"]
    assert app.kind_of_type(SendEmail) == "mail.send"


def test_kind_only_registration_is_untyped() -> None:
    app = awa.App()

    @app.task(kind="raw_kind")
    def raw(job: awa.Job) -> None: ...

    assert app.tasks["raw_kind"].args_type is None


def test_task_needs_a_type_or_a_kind() -> None:
    with pytest.raises(RegistrationError, match="args type or kind"):
        awa.App().task()


def test_duplicate_kind_raises_with_both_handler_names() -> None:
    app = awa.App()

    @app.task(SendEmail)
    async def first_handler(job: awa.Job) -> None: ...

    with pytest.raises(RegistrationError) as info:

        @app.task(SendEmail)
        async def second_handler(job: awa.Job) -> None: ...

    message = str(info.value)
    assert "send_email" in message and "first_handler" in message and "second_handler" in message
    assert isinstance(info.value, awa.AwaError)


def test_registering_the_same_function_twice_is_harmless() -> None:
    app = awa.App()

    def handler(job: awa.Job) -> None: ...

    app.task(SendEmail)(handler)
    app.task(SendEmail)(handler)
    assert app.tasks["send_email"].fn is handler


def test_non_callable_handler_raises() -> None:
    with pytest.raises(RegistrationError, match="not callable"):
        awa.App().task(SendEmail)("not a function")  # type: ignore[arg-type]


# -- hooks -------------------------------------------------------------------------------
def test_hooks_stack_in_registration_order_and_are_returned_unchanged() -> None:
    app = awa.App()

    @app.task(SendEmail)
    async def send(job: awa.Job) -> None: ...

    @app.on_event(SendEmail)
    async def first(event: object) -> None: ...

    def second(event: object) -> None: ...

    assert app.on_event_kind("send_email", second) is second

    @app.on_event_kind("send_email")
    def third(event: object) -> None: ...

    hooks = app.hooks["send_email"]
    assert [h.fn for h in hooks] == [first, second, third]
    assert [h.args_type for h in hooks] == [SendEmail, None, None]


def test_typed_hook_uses_the_registered_kind_of_its_type() -> None:
    app = awa.App()

    @app.task(SendEmail, kind="mail")
    async def send(job: awa.Job) -> None: ...

    @app.on_event(SendEmail)
    def hook(event: object) -> None: ...

    assert [h.fn for h in app.hooks["mail"]] == [hook]


def test_non_callable_hook_raises() -> None:
    with pytest.raises(RegistrationError, match="not callable"):
        awa.App().on_event_kind("send_email", 42)  # type: ignore[arg-type]


# -- merging and load_apps ---------------------------------------------------------------
def test_two_apps_merge() -> None:
    one, two = awa.App(), awa.App()

    @one.task(SendEmail)
    async def send(job: awa.Job) -> None: ...

    @two.task(SMTPPing)
    def ping(job: awa.Job) -> None: ...

    two.on_event_kind("send_email", print)
    merged = awa.App().merge(one).merge(two)
    assert set(merged.tasks) == {"send_email", "smtp_ping"}
    assert [h.fn for h in merged.hooks["send_email"]] == [print]


_counter = itertools.count()


def write_module(tmp_path: Path, source: str) -> str:
    """A uniquely named module in ``tmp_path`` (so sys.modules never caches across tests)."""
    name = f"awa_test_app_mod_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    return name


APP_SOURCE = """
    from dataclasses import dataclass
    import awa_cli as awa

    @dataclass
    class {cls}:
        n: int = 0

    {var} = awa.App()

    @{var}.task({cls})
    async def handle(job):
        pass
"""


def test_load_apps_of_module_and_module_attr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = write_module(tmp_path, APP_SOURCE.format(cls="AlphaJob", var="app"))
    custom = write_module(tmp_path, APP_SOURCE.format(cls="BetaJob", var="workers"))
    merged = load_apps([plain, f"{custom}:workers"], tmp_path)
    assert set(merged.tasks) == {"alpha_job", "beta_job"}


def test_load_apps_imports_from_the_config_folder(tmp_path: Path) -> None:
    name = write_module(tmp_path, APP_SOURCE.format(cls="GammaJob", var="app"))
    assert set(load_apps([name], base_dir=tmp_path).tasks) == {"gamma_job"}


def test_a_kind_in_two_modules_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    one = write_module(tmp_path, APP_SOURCE.format(cls="DeltaJob", var="app"))
    two = write_module(tmp_path, APP_SOURCE.format(cls="DeltaJob", var="app"))
    with pytest.raises(RegistrationError) as info:
        load_apps([one, two], tmp_path)
    assert "delta_job" in str(info.value)
    assert f"{one}.handle" in str(info.value) and f"{two}.handle" in str(info.value)


def test_a_module_without_an_app_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = write_module(tmp_path, "x = 1\n")
    with pytest.raises(AwaError, match=rf"{name}.*no attribute 'app'"):
        load_apps([name], tmp_path)
    with pytest.raises(AwaError, match=rf"{name}:x.*is int, not an awa App"):
        load_apps([f"{name}:x"], tmp_path)


def test_an_unimportable_module_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AppNotFound, match="no module named 'awa_no_such_module_here'"):
        load_apps(["awa_no_such_module_here"], tmp_path)
