"""HTTP callbacks (architecture §12): signatures, and the ASGI app against a real database.

The signature tests need no database. The app tests park a real job on a callback with the
test harness (the worker's claim and outcome core), then resolve it over HTTP in-process with
Starlette's TestClient, through an AsyncClient bound to the app, so follow-up specs and hooks
are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient

import awa_cli as awa
from awa_cli import callbacks
from awa_cli.callbacks import SignatureError, sign, verify
from awa_cli.testing import AsyncAwaTestClient
from tests.helpers import add_noop_tasks, job_row, running_worker, wait_until

KEY = "whsec-newest-0123456789abcdef"
OLD_KEY = "whsec-older-0123456789abcdef"
CB = "3f2b8c1e-5d4a-4c1b-9e8f-0a1b2c3d4e5f"


# --- sign / verify (no database) -------------------------------------------------------------


def test_round_trip_and_the_documented_formula() -> None:
    body = b'{"payload": {"ok": true}}'
    headers = sign(KEY, CB, body, timestamp=1_700_000_000)
    assert set(headers) == {"Awa-Timestamp", "Awa-Signature"}
    assert headers["Awa-Timestamp"] == "1700000000"
    import hashlib
    import hmac

    signed = b"1700000000." + CB.encode() + b".complete." + body
    expected = hmac.new(KEY.encode(), signed, hashlib.sha256)
    assert headers["Awa-Signature"] == f"v2={expected.hexdigest()}"
    verified = verify([KEY], CB, body, headers, now=1_700_000_000)
    assert verified.timestamp == 1_700_000_000 and verified.key_index == 0
    beat = sign(KEY, CB, body, timestamp=1_700_000_000, action="heartbeat")
    assert verify([KEY], CB, body, beat, "heartbeat", now=1_700_000_000).key_index == 0


@pytest.mark.parametrize("other", ["complete", "retry", "resume", "fail"])
def test_a_signature_covers_its_action(other: str) -> None:
    """M1: a captured heartbeat's headers do not verify for any other action."""
    headers = sign(KEY, CB, b"", action="heartbeat")
    with pytest.raises(SignatureError, match="matches no configured key"):
        verify([KEY], CB, b"", headers, other)


def test_v1_signatures_are_gone() -> None:
    import hashlib
    import hmac

    ts = str(int(time.time()))
    old = hmac.new(KEY.encode(), f"{ts}.{CB}.".encode(), hashlib.sha256).hexdigest()
    with pytest.raises(SignatureError, match="expected v2="):
        verify([KEY], CB, b"", {"Awa-Timestamp": ts, "Awa-Signature": f"v1={old}"})


def test_key_may_be_bytes_and_body_may_be_text() -> None:
    headers = sign(KEY.encode(), uuid.UUID(CB), '{"a": 1}')
    assert verify([KEY], CB, b'{"a": 1}', headers).key_index == 0


@pytest.mark.parametrize(
    ("callback_id", "body"),
    [(CB, b'{"payload": {"ok": false}}'), (str(uuid.uuid4()), b'{"payload": {"ok": true}}')],
    ids=["tampered-body", "tampered-id"],
)
def test_tampering_is_refused(callback_id: str, body: bytes) -> None:
    headers = sign(KEY, CB, b'{"payload": {"ok": true}}')
    with pytest.raises(SignatureError, match="matches no configured key"):
        verify([KEY], callback_id, body, headers)


def test_wrong_key_is_refused() -> None:
    with pytest.raises(SignatureError):
        verify([KEY], CB, b"{}", sign("another-key-0123456789", CB, b"{}"))


def test_rotation_accepts_every_configured_key() -> None:
    body = b"{}"
    assert verify([KEY, OLD_KEY], CB, body, sign(OLD_KEY, CB, body)).key_index == 1
    assert verify([KEY, OLD_KEY], CB, body, sign(KEY, CB, body)).key_index == 0
    # A sender mid-rotation may send one signature per key, separated by spaces.
    both = sign(OLD_KEY, CB, body)
    both["Awa-Signature"] = "v2=" + "0" * 64 + " " + both["Awa-Signature"]
    assert verify([OLD_KEY], CB, body, both).key_index == 0
    with pytest.raises(SignatureError):
        verify([KEY], CB, body, sign(OLD_KEY, CB, body))  # the old key once dropped


@pytest.mark.parametrize("offset", [-301, 301, -10_000], ids=["stale", "future", "old"])
def test_timestamps_outside_the_window_are_refused(offset: int) -> None:
    now = time.time()
    headers = sign(KEY, CB, b"{}", timestamp=int(now) + offset)
    with pytest.raises(SignatureError, match="300 s"):
        verify([KEY], CB, b"{}", headers, now=now)


@pytest.mark.parametrize("offset", [-299, 299])
def test_timestamps_inside_the_window_pass(offset: int) -> None:
    now = time.time()
    headers = sign(KEY, CB, b"{}", timestamp=int(now) + offset)
    assert verify([KEY], CB, b"{}", headers, now=int(now)).timestamp == int(now) + offset


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing Awa-Timestamp"),
        ({"Awa-Timestamp": "soon"}, "malformed Awa-Timestamp"),
        ({"Awa-Timestamp": "NOW"}, "malformed Awa-Timestamp"),
        ({"Awa-Timestamp": "{now}"}, "missing Awa-Signature"),
        ({"Awa-Timestamp": "{now}", "Awa-Signature": "abc"}, "expected v2="),
    ],
)
def test_missing_or_malformed_headers(headers: dict[str, str], reason: str) -> None:
    # "{now}" is the clock when the test runs, not when it was collected: a long parallel
    # run reaches a test more than 300 s after collecting it.
    now = str(int(time.time()))
    headers = {name: value.replace("{now}", now) for name, value in headers.items()}
    with pytest.raises(SignatureError, match=reason):
        verify([KEY], CB, b"{}", headers)


def test_header_names_are_case_insensitive_and_no_keys_refuses() -> None:
    headers = {k.lower(): v for k, v in sign(KEY, CB, b"{}").items()}
    assert verify([KEY], CB, b"{}", headers).key_index == 0
    with pytest.raises(SignatureError, match="no callback signing key"):
        verify([], CB, b"{}", headers)


def test_callback_url() -> None:
    assert (
        callbacks.callback_url("https://jobs.example.com/callbacks/", CB, "fail")
        == f"https://jobs.example.com/callbacks/{CB}/fail"
    )
    assert callbacks.callback_url("http://h/cb", CB).endswith(f"/{CB}/complete")
    with pytest.raises(awa.ValidationError, match="action"):
        callbacks.callback_url("http://h/cb", CB, "explode")


def test_callback_token_url() -> None:
    token = awa.CallbackToken(uuid.UUID(CB), 1, 1, callbacks.callback_urls("https://h/cb", CB))
    assert token.url() == f"https://h/cb/{CB}/complete"
    assert token.url("heartbeat") == f"https://h/cb/{CB}/heartbeat"
    with pytest.raises(awa.ValidationError, match="action"):
        token.url("explode")
    with pytest.raises(awa.ValidationError, match="callback_base_url"):
        awa.CallbackToken(uuid.UUID(CB), 1, 1).url()


# --- the ASGI app against a real database ----------------------------------------------------


@dataclass
class Hook:
    n: int = 0


@dataclass
class Notify:
    n: int = 0


def hook_app(events: list[object]) -> awa.App:
    app = awa.App()

    @app.task(Hook)
    async def hook(job: awa.Job) -> awa.JobResult:
        token = await job.register_callback(timeout=600)
        return awa.WaitForCallback(token)

    add_noop_tasks(app, Notify)

    @app.on_completed_enqueue(Hook, Notify)
    def then_notify(args: Hook, job: awa.JobRow) -> Notify:
        if args.n < 0:
            raise RuntimeError("the follow-up spec broke")
        return Notify(args.n)

    app.on_event_kind("hook", events.append)
    return app


def park(dsn: str, app: awa.App, n: int = 1) -> awa.JobRow:
    """A real job of ``app`` waiting on a callback (claimed and parked by the harness)."""

    async def run() -> awa.JobRow:
        async with AsyncAwaTestClient(dsn, app) as harness:
            await harness.insert(Hook(n))
            result = await harness.work_one(Hook)
        assert result.outcome == "waiting_external" and result.job is not None
        return result.job

    return asyncio.run(run())


def user_app(client: awa.AsyncClient, keys: list[str], prefix: str = "") -> Starlette:
    """A user's own Starlette app with the callback routes mounted (the README's example)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.close()

    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("the user's own page")

    return Starlette(
        routes=[
            Route("/", home),
            Mount(prefix or "/callbacks", callbacks.asgi_app(client, keys)),
        ],
        lifespan=lifespan,
    )


@pytest.fixture
def http(dsn: str) -> Iterator[tuple[TestClient, list[object], awa.App]]:
    events: list[object] = []
    app = hook_app(events)
    client = awa.AsyncClient(dsn, app=app)
    with TestClient(user_app(client, [KEY, OLD_KEY])) as test_client:
        yield test_client, events, app


@pytest.fixture
def parked_http(
    dsn: str, http: tuple[TestClient, list[object], awa.App]
) -> tuple[TestClient, awa.JobRow]:
    """The ``http`` client and one job of its app parked on a callback."""
    client, _, app = http
    return client, park(dsn, app)


def post(
    http: TestClient, callback_id: object, action: str, body: object = None, key: str = KEY
) -> object:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = sign(
        key, str(callback_id), raw, action=action if action in callbacks.ACTIONS else "complete"
    )
    return http.post(f"/callbacks/{callback_id}/{action}", content=raw, headers=headers)


def follow_ups(dsn: str) -> list[tuple[str, dict[str, object]]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT kind, args FROM awa.jobs WHERE kind = 'notify'").fetchall()


integration = pytest.mark.integration


@integration
def test_complete_runs_the_follow_up_atomically_and_fires_hooks(
    dsn: str, http: tuple[TestClient, list[object], awa.App]
) -> None:
    client, events, app = http
    parked = park(dsn, app, n=7)
    response = post(client, parked.callback_id, "complete", {"payload": {"ok": 1}})
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["id"] == parked.id and data["state"] == "completed"
    assert data["callback_result"] == {"ok": 1}
    assert follow_ups(dsn) == [("notify", {"n": 7})]
    deadline = time.monotonic() + 10
    while not any(isinstance(e, awa.JobEvent.Completed) for e in events):
        assert time.monotonic() < deadline, "the Completed hook never fired"
        time.sleep(0.02)
    # Already resolved: 404, and nothing changes.
    again = post(client, parked.callback_id, "complete", {"payload": {"ok": 2}})
    assert again.status_code == 404 and "error" in again.json()
    assert job_row(dsn, parked.id).callback_result == {"ok": 1}


@integration
def test_a_raising_follow_up_spec_answers_500_and_leaves_the_job_waiting(
    dsn: str, http: tuple[TestClient, list[object], awa.App]
) -> None:
    client, _, app = http
    parked = park(dsn, app, n=-1)
    response = post(client, parked.callback_id, "complete", {"payload": 1})
    assert response.status_code == 500
    assert "the follow-up spec broke" in response.json()["error"]
    assert "\n" not in response.text
    row = job_row(dsn, parked.id)
    assert row.state == "waiting_external" and row.callback_id == parked.callback_id
    assert follow_ups(dsn) == []


@integration
def test_fail_retry_resume_heartbeat(
    dsn: str, http: tuple[TestClient, list[object], awa.App]
) -> None:
    client, _, app = http
    a, b, c, d = (park(dsn, app) for _ in range(4))
    r = post(client, a.callback_id, "fail", {"error": "the vendor said no"})
    assert r.status_code == 200 and r.json()["state"] == "failed"
    assert r.json()["errors"][-1]["error"] == "the vendor said no"
    r = post(client, b.callback_id, "retry", key=OLD_KEY)  # signed with the older key
    assert r.status_code == 200 and r.json()["state"] == "available"
    r = post(client, c.callback_id, "resume", {"payload": {"step": 2}})
    assert r.status_code == 200 and r.json()["state"] == "available"
    assert job_row(dsn, c.id).callback_result == {"step": 2}
    before = job_row(dsn, d.id).callback_timeout_at
    r = post(client, d.callback_id, "heartbeat", {"timeout": "2h"})
    assert r.status_code == 200 and r.json()["state"] == "waiting_external"
    after = job_row(dsn, d.id).callback_timeout_at
    assert before is not None and after is not None and after > before


@integration
def test_bad_signatures_answer_401_and_change_nothing(
    dsn: str, parked_http: tuple[TestClient, awa.JobRow]
) -> None:
    client, parked = parked_http
    url = f"/callbacks/{parked.callback_id}/complete"
    raw = b'{"payload": 1}'
    unsigned = client.post(url, content=raw)
    wrong_key = client.post(
        url, content=raw, headers=sign("not-the-key-0123456", str(parked.callback_id), raw)
    )
    other_body = client.post(
        url, content=b'{"payload": 2}', headers=sign(KEY, str(parked.callback_id), raw)
    )
    stale = client.post(
        url, content=raw, headers=sign(KEY, str(parked.callback_id), raw, int(time.time()) - 400)
    )
    for response in (unsigned, wrong_key, other_body, stale):
        assert response.status_code == 401, response.text
        assert set(response.json()) == {"error"}
    assert job_row(dsn, parked.id).state == "waiting_external"


@integration
def test_unknown_callback_and_bad_bodies(
    dsn: str, parked_http: tuple[TestClient, awa.JobRow]
) -> None:
    client, parked = parked_http
    assert post(client, uuid.uuid4(), "complete").status_code == 404
    assert post(client, "not-a-uuid", "complete").status_code == 404
    assert post(client, parked.callback_id, "explode").status_code == 404
    for action, body in [
        ("complete", {"payload": 1, "extra": 2}),
        ("complete", [1, 2]),
        ("fail", {}),
        ("fail", {"error": 3}),
        ("heartbeat", {"timeout": "soon"}),
        ("retry", {"payload": 1}),
    ]:
        response = post(client, parked.callback_id, action, body)
        assert response.status_code == 422, (action, body, response.text)
        assert set(response.json()) == {"error"}
    raw = b"{not json"
    response = client.post(
        f"/callbacks/{parked.callback_id}/complete",
        content=raw,
        headers=sign(KEY, str(parked.callback_id), raw),
    )
    assert response.status_code == 422
    assert job_row(dsn, parked.id).state == "waiting_external"
    assert client.get(f"/callbacks/{parked.callback_id}/complete").status_code == 405


@integration
def test_no_keys_answers_404_for_every_request(dsn: str) -> None:
    app = hook_app([])
    parked = park(dsn, app)
    client = awa.AsyncClient(dsn, app=app)
    with TestClient(user_app(client, [])) as http:
        response = post(http, parked.callback_id, "complete")
    assert response.status_code == 404 and "not enabled" in response.json()["error"]
    assert job_row(dsn, parked.id).state == "waiting_external"


@integration
def test_mounted_under_a_prefix_in_a_users_app(dsn: str) -> None:
    app = hook_app([])
    parked = park(dsn, app)
    client = awa.AsyncClient(dsn, app=app)
    with TestClient(user_app(client, [KEY], prefix="/hooks/awa")) as http:
        assert http.get("/").text == "the user's own page"
        raw = b'{"payload": "via prefix"}'
        cid = str(parked.callback_id)
        url = callbacks.callback_url("http://testserver/hooks/awa", cid)
        response = http.post(url, content=raw, headers=sign(KEY, cid, raw))
    assert response.status_code == 200, response.text
    assert job_row(dsn, parked.id).callback_result == "via prefix"


@integration
def test_a_kind_the_apps_client_does_not_register_answers_409(dsn: str) -> None:
    parked = park(dsn, hook_app([]))
    other = add_noop_tasks(awa.App(), Notify)
    with TestClient(user_app(awa.AsyncClient(dsn, app=other), [KEY])) as http:
        refused = post(http, parked.callback_id, "complete", {"payload": 1})
        extended = post(http, parked.callback_id, "heartbeat", {"timeout": 60})
    assert refused.status_code == 409 and "does not register" in refused.json()["error"]
    assert extended.status_code == 200  # a heartbeat changes no state: nothing to refuse
    assert job_row(dsn, parked.id).state == "waiting_external"
    with TestClient(user_app(awa.AsyncClient(dsn), [KEY])) as http:  # no app: resolves bare
        bare = post(http, parked.callback_id, "complete", {"payload": 1})
    assert bare.status_code == 200 and follow_ups(dsn) == []


class _InvalidStateClient:
    """A stand-in client whose resolution reports the job in a state it cannot leave that way.

    Today's outcome core folds every unresolvable state into CallbackNotFound (404), so no real
    job reaches InvalidJobState through a callback; this pins the mapping for when one does."""

    app = None

    async def complete_external(self, callback_id: object, payload: object = None) -> object:
        from awa_cli.outcomes import InvalidJobState

        raise InvalidJobState("job 1 is running and cannot be completed")

    async def close(self) -> None:
        return None


def test_a_job_in_an_unresolvable_state_answers_409() -> None:
    http = TestClient(callbacks.asgi_app(_InvalidStateClient(), [KEY]))  # type: ignore[arg-type]
    raw = b"{}"
    response = http.post(f"/{CB}/complete", content=raw, headers=sign(KEY, CB, raw))
    assert response.status_code == 409 and "cannot be completed" in response.json()["error"]


@integration
@pytest.mark.asyncio
async def test_a_worker_with_callback_base_url_gives_tokens_their_urls(dsn: str) -> None:
    tokens: list[awa.CallbackToken] = []
    app = awa.App()

    @app.task(Hook)
    async def hook(job: awa.Job) -> awa.JobResult:
        token = await job.register_callback(timeout=600)
        tokens.append(token)
        return awa.WaitForCallback(token)

    base = "https://jobs.example.com/callbacks"
    async with running_worker(app, dsn, callback_base_url=base):
        async with awa.AsyncClient(dsn) as client:
            await client.insert(Hook(1))
        await wait_until(lambda: bool(tokens))
    [token] = tokens
    assert token.url() == f"{base}/{token.id}/complete"
    assert token.url("fail") == callbacks.callback_url(base, token.id, "fail")


# --- the security review's callback findings (M1, M2, I3, I4, I12) ----------------------------


@integration
@pytest.mark.parametrize("replayed_to", ["complete", "retry", "resume"])
def test_a_captured_heartbeat_replayed_to_another_action_is_refused(
    dsn: str, parked_http: tuple[TestClient, awa.JobRow], replayed_to: str
) -> None:
    """M1 (review attack 47): the headers and body of a signed heartbeat answer 401 at any
    other action, and the job keeps waiting."""
    client, parked = parked_http
    cid = str(parked.callback_id)
    captured = sign(KEY, cid, b"", action="heartbeat")
    beat = client.post(f"/callbacks/{cid}/heartbeat", content=b"", headers=captured)
    assert beat.status_code == 200, beat.text
    replay = client.post(f"/callbacks/{cid}/{replayed_to}", content=b"", headers=captured)
    assert replay.status_code == 401, replay.text
    assert job_row(dsn, parked.id).state == "waiting_external"


async def _asgi_post(
    app: Starlette,
    path: str,
    headers: list[tuple[bytes, bytes]],
    receive: Callable[[], Awaitable[dict[str, object]]],
) -> int:
    """One POST to ``path`` straight through ASGI, its body from ``receive``: the status."""
    status = 0

    async def send(message: dict[str, object]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])  # type: ignore[call-overload]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8477),
    }
    await app(scope, receive, send)  # type: ignore[arg-type]
    return status


async def _call_asgi(
    app: Starlette, headers: list[tuple[bytes, bytes]], chunks: list[bytes]
) -> tuple[int, int]:
    """One POST straight through ASGI: (status, how many body chunks the app pulled)."""
    pulled = 0

    async def receive() -> dict[str, object]:
        nonlocal pulled
        if pulled >= len(chunks):
            return {"type": "http.disconnect"}
        pulled += 1
        return {
            "type": "http.request",
            "body": chunks[pulled - 1],
            "more_body": pulled < len(chunks),
        }

    status = await _asgi_post(app, f"/{CB}/complete", headers, receive)
    return status, pulled


def test_an_unsigned_or_oversized_body_is_refused_before_it_is_read() -> None:
    """M2 (review attacks 49, 51): no signature headers, a stale timestamp, or a declared
    Content-Length over max_body: answered without pulling one body chunk."""
    app = callbacks.asgi_app(_InvalidStateClient(), [KEY], max_body=1024)  # type: ignore[arg-type]
    big = [b"x" * 512] * 8
    signed = [(k.lower().encode(), v.encode()) for k, v in sign(KEY, CB, b"x").items()]
    stale = [
        (k.lower().encode(), v.encode())
        for k, v in sign(KEY, CB, b"x", timestamp=int(time.time()) - 400).items()
    ]
    cases = [
        ([(b"content-length", b"4096")], 401),
        (stale + [(b"content-length", b"4096")], 401),
        ([*signed, (b"content-length", b"4096")], 413),
    ]
    for headers, expected in cases:
        assert asyncio.run(_call_asgi(app, headers, big)) == (expected, 0), headers
    # Chunked (no Content-Length): streamed up to the cap, then refused.
    status, pulled = asyncio.run(_call_asgi(app, signed, big))
    assert status == 413 and pulled == 3


def test_the_default_body_limit_is_one_mib() -> None:
    assert callbacks.MAX_BODY_BYTES == 1024 * 1024


@integration
def test_deep_json_answers_400_and_a_huge_heartbeat_422(
    dsn: str, parked_http: tuple[TestClient, awa.JobRow]
) -> None:
    """I3 (attack 42) and I4 (attack 50)."""
    client, parked = parked_http
    cid = str(parked.callback_id)
    deep = b'{"payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = client.post(f"/callbacks/{cid}/complete", content=deep, headers=sign(KEY, cid, deep))
    assert response.status_code == 400 and set(response.json()) == {"error"}, response.text
    huge = post(client, cid, "heartbeat", {"timeout": "876000h"})
    assert huge.status_code == 422 and "7d" in huge.json()["error"]
    assert post(client, cid, "heartbeat", {"timeout": "7d"}).status_code == 200
    assert job_row(dsn, parked.id).state == "waiting_external"


@integration
def test_the_audit_entry_says_which_key_verified(dsn: str) -> None:
    """I12: the audit seam is given key_index (1: the older key of a rotation)."""
    app = hook_app([])
    parked = park(dsn, app)
    seen: list[tuple[object, ...]] = []

    async def audit(*entry: object) -> None:
        seen.append(entry)

    client = awa.AsyncClient(dsn, app=app)
    cid = str(parked.callback_id)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await client.close()

    mounted = Starlette(
        routes=[Mount("/cb", callbacks.asgi_app(client, [KEY, OLD_KEY], audit=audit))],
        lifespan=lifespan,
    )
    raw = b'{"payload": 1}'
    with TestClient(mounted) as http:
        response = http.post(f"/cb/{cid}/complete", content=raw, headers=sign(OLD_KEY, cid, raw))
    assert response.status_code == 200, response.text
    assert seen == [("callback", "callback.complete", f"callback:{cid}", "ok", {"key_index": 1})]


async def _post_asgi(app: Starlette, path: str, raw: bytes, headers: dict[str, str]) -> int:
    sent = False

    async def receive() -> dict[str, object]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)  # a client that stays connected
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    encoded = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return await _asgi_post(app, path, encoded, receive)


@integration
def test_concurrent_resolutions_of_one_callback_have_one_winner(dsn: str) -> None:
    """Review attack 45: 20 concurrent signed resolutions (complete, fail, retry, resume) of
    one callback: exactly one 200, at most one follow-up."""
    app = hook_app([])
    parked = park(dsn, app)
    cid = str(parked.callback_id)
    bodies = {
        "complete": b'{"payload": 1}',
        "fail": b'{"error": "no"}',
        "retry": b"",
        "resume": b'{"payload": 2}',
    }

    async def race() -> list[int]:
        client = awa.AsyncClient(dsn, app=app)
        endpoint = callbacks.asgi_app(client, [KEY])
        try:
            calls = []
            for i in range(20):
                action = list(bodies)[i % 4]
                raw = bodies[action]
                headers = sign(KEY, cid, raw, action=action)
                calls.append(_post_asgi(endpoint, f"/{cid}/{action}", raw, headers))
            return list(await asyncio.gather(*calls))
        finally:
            await client.close()

    statuses = asyncio.run(race())
    assert statuses.count(200) == 1 and set(statuses) <= {200, 404}, statuses
    assert len(follow_ups(dsn)) <= 1
