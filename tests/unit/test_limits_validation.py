"""``validate_limits``: a ``[limits.NAME]`` table checked against the loaded app (no
database): the kind or queue exists, the key path is a field path of the args type
(dataclass, pydantic model, nested, optional), a dict-args kind accepts any path."""

from __future__ import annotations

from dataclasses import dataclass

import pydantic

import awa_cli as awa
from awa_cli.limits import Limit, args_have_path, validate_limits


@dataclass
class Account:
    id: str


@dataclass
class Sync:
    tenant_id: str
    account: Account | None = None


class Report(pydantic.BaseModel):
    tenant: str = pydantic.Field(alias="tenantName")


def _app() -> awa.App:
    app = awa.App()

    @app.task(Sync, queue="sync", kind="sync_account")
    async def sync_account(job: awa.Job) -> None: ...

    @app.task(Report, kind="report")
    async def report(job: awa.Job) -> None: ...

    @app.task(kind="loose")
    async def loose(job: awa.Job) -> None: ...

    return app


def _errors(**kw: object) -> list[str]:
    limit = Limit(name="x", max_running=int(kw.pop("max_running", 2)), **kw)  # type: ignore[arg-type]
    return [e.message for e in validate_limits([limit], _app(), ["email"])]


def test_fitting_limits_have_no_error() -> None:
    assert _errors(kind="sync_account", key="args.tenant_id") == []
    assert _errors(kind="sync_account", key="args.account.id") == []  # nested, optional
    assert _errors(kind="report", key="args.tenant") == []
    assert _errors(kind="report", key="args.tenantName") == []  # the alias is the JSON key
    assert _errors(kind="loose", key="args.any.path") == []  # dict args: anything
    assert _errors(kind="sync_account", key="kind") == []
    assert _errors(queue="sync", key="args.tenant_id") == []
    assert _errors(queue="email", key="queue") == []  # a configured queue
    assert _errors(queue="default", key="args.whatever") == []  # no typed kind registered there


def test_an_unknown_kind_or_queue_is_named_with_a_suggestion() -> None:
    assert _errors(kind="sync_acount", key="args.tenant_id") == [
        "[limits.x] kind: no kind named 'sync_acount' in the app (did you mean 'sync_account'?)"
    ]
    assert _errors(queue="emial", key="queue") == [
        "[limits.x] queue: no queue named 'emial' in the app (did you mean 'email'?)"
    ]
    assert _errors(kind="zzz", key="kind") == ["[limits.x] kind: no kind named 'zzz' in the app"]


def test_a_key_path_not_in_the_args_type_is_an_error() -> None:
    assert _errors(kind="sync_account", key="args.tenantid") == [
        "[limits.x] key: 'args.tenantid' is not a field path of the args of sync_account (Sync)"
    ]
    assert _errors(kind="sync_account", key="args.account.name") != []
    assert _errors(queue="sync", key="args.nope") != []


def test_max_running_and_rate_are_checked() -> None:
    assert _errors(kind="loose", key="kind", max_running=0) == [
        "[limits.x] max_running: must be at least 1, got 0"
    ]
    assert _errors(kind="loose", key="kind", rate_count=0, rate_window=1.0) != []


def test_args_have_path() -> None:
    assert args_have_path({"a": {"b": 1}}, ("a", "b"))
    assert not args_have_path({"a": {}}, ("a", "b"))
    assert not args_have_path({"a": None}, ("a",))
    assert not args_have_path([], ("a",))
