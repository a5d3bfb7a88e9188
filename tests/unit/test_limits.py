"""``[limits.NAME]``, ``priority_aging`` and the ``concurrency_key`` option, without a
database: one-line errors naming the TOML key or field, the claim plan, the candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

import awa_cli as awa
from awa_cli.config import Config, load_config
from awa_cli.enqueue import InsertOpts, prepare
from awa_cli.limits import Candidates, ClaimPlan, Limit, array_literal

GOOD = '[limits.per_tenant]\nkind = "sync"\nkey = "args.tenant.id"\nmax_running = 2\n'


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "awa.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, explicit=True)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(awa.ConfigError) as info:
        _load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_limit_table(tmp_path: Path) -> None:
    config = _load(tmp_path, GOOD + 'rate = "100/1m"\n[queues.default]\npriority_aging = "5m"\n')
    limit = config.limits["per_tenant"]
    assert (limit.kind, limit.queue, limit.key, limit.max_running) == (
        "sync",
        None,
        "args.tenant.id",
        2,
    )
    assert (limit.rate_count, limit.rate_window, limit.rate) == (100, 60.0, "100/1m")
    assert limit.key_path == ("tenant", "id")
    assert config.queues["default"].priority_aging == 300.0
    assert config.to_display_dict()["limits"]["per_tenant"]["rate"] == "100/1m"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[limits.a]\nkey = "kind"\nmax_running = 1\n',
            "[limits.a]: set exactly one of kind or queue",
        ),
        (
            '[limits.a]\nkind = "k"\nqueue = "q"\nkey = "kind"\nmax_running = 1\n',
            "[limits.a]: set exactly one of kind or queue",
        ),
        ('[limits.a]\nkind = "k"\nmax_running = 1\n', "[limits.a]: missing required key key"),
        ('[limits.a]\nkind = "k"\nkey = "kind"\n', "[limits.a]: missing required key max_running"),
        ('[limits.a]\nkind = "k"\nkey = "args"\nmax_running = 1\n', "[limits.a] key: expected"),
        ('[limits.a]\nkind = "k"\nkey = "args.a b"\nmax_running = 1\n', "[limits.a] key: expected"),
        ('[limits.a]\nkind = "k"\nkey = "tenant"\nmax_running = 1\n', "[limits.a] key: expected"),
        ('[limits.a]\nkind = "k"\nkey = "kind"\nmax_running = 0\n', "[limits.a] max_running:"),
        (
            '[limits.a]\nkind = "k"\nkey = "kind"\nmax_running = 1\nrate = "ten/1m"\n',
            '[limits.a] rate: expected "N/DURATION" like "100/1m"',
        ),
        (
            '[limits.a]\nkind = "k"\nkey = "kind"\nmax_running = 1\nrate = "5/2d"\n',
            "[limits.a] rate: the window must be more than 0 and at most 1d",
        ),
        (
            '[limits.a]\nkind = "k"\nkey = "kind"\nmax_running = 1\nburst = 3\n',
            "unknown key [limits.a] burst",
        ),
        (
            GOOD + '[limits.other]\nkind = "sync"\nkey = "kind"\nmax_running = 1\n',
            "[limits.other] kind: 'sync' is already limited by [limits.per_tenant]",
        ),
        ('[queues.default]\npriority_aging = "soon"\n', "[queues.default] priority_aging:"),
    ],
)
def test_bad_limits_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _error(tmp_path, text)


def test_the_concurrency_key_option() -> None:
    job = prepare({"a": 1}, InsertOpts(kind="k", concurrency_key="tenant-1"))
    assert job.concurrency_key == "tenant-1"
    assert prepare({"a": 1}, InsertOpts(kind="k")).concurrency_key is None
    for bad in ("", "x" * 201, 7):
        with pytest.raises(awa.ValidationError) as info:
            prepare({}, InsertOpts(kind="k", concurrency_key=bad))  # type: ignore[arg-type]
        assert info.value.field == "concurrency_key"
    request = awa.EnqueueRequest({"a": 1}).concurrency_key("t")
    assert request.opts.concurrency_key == "t"


def test_a_claim_plan_keeps_the_limits_that_can_select_the_queue() -> None:
    by_kind = Limit("k", key="kind", max_running=1, kind="sync")
    mine = Limit("q", key="queue", max_running=1, queue="email")
    other = Limit("o", key="queue", max_running=1, queue="reports")
    plan = ClaimPlan.for_queue("email", [by_kind, mine, other])
    assert plan.limits == (by_kind, mine) and plan.needed
    assert not ClaimPlan.for_queue("email", [other]).needed  # the plain claim stays
    assert ClaimPlan.for_queue("email", [], priority_aging=60).needed
    params = ClaimPlan((Limit("t", key="args.a.b", max_running=3, kind="x"),)).params
    assert params["l_sources"] == '{"args"}' and params["l_paths"] == '{"{a,b}"}'
    assert params["l_kinds"] == '{"x"}' and params["l_queues"] == "{NULL}"


def test_array_literals_round_trip_through_postgres_quoting() -> None:
    # the parser's rules: an element in double quotes, backslash escapes \\ and \", NULL bare
    assert array_literal(["a", None, 'q"u', "b\\s", "{x,y}", "NULL", ""]) == (
        '{"a",NULL,"q\\"u","b\\\\s","{x,y}","NULL",""}'
    )
    assert array_literal([1, None, 2.5]) == "{1,NULL,2.5}"
    assert array_literal([]) == "{}"


def test_candidates_run_out_grow_old_and_take_back_the_unused() -> None:
    cache = Candidates(max_age=1.0, full_max_age=5.0)
    assert not cache.usable(0.0)
    cache.refill([(1, "l", "a", 1), (2, "l", "b", 1), (3, None, None, 1)], now=10.0)
    assert cache.usable(14.5) and not cache.usable(15.5)
    assert not cache.stale_arrivals(10.5) and cache.stale_arrivals(11.5)
    assert cache.take(2) == [(1, "l", "a", 1), (2, "l", "b", 1)]
    cache.put_back([(2, "l", "b", 1)])
    assert cache.take(5) == [(2, "l", "b", 1), (3, None, None, 1)]
    assert not cache.usable(10.5)


def test_arrivals_go_after_their_keys_cached_candidates() -> None:
    cache = Candidates()
    cache.refill([(1, "l", "a", 1), (2, "l", "b", 1), (3, "l", "a", 2), (4, "l", "a", 3)], 0.0, 4)
    assert cache.take(1) == [(1, "l", "a", 1)]
    # a new key's first job goes ahead of "a"'s backlog; a new job of "a" after all of it;
    # a job already cached is not added twice
    cache.merge([(5, "l", "a", 1), (6, "l", "c", 1), (7, "l", "c", 2), (3, "l", "a", 1)], 1.0, 7)
    assert [c[0] for c in cache.take(10)] == [2, 6, 3, 7, 4, 5]
    assert cache.watermark == 7
