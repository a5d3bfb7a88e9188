"""HTTP callbacks: signing, verification, URLs and the mountable ASGI app (architecture §12).

The one implementation, used by ``awa serve`` (mounted at ``/callbacks``) and by a user's own
Starlette or FastAPI application (``app.mount("/awa", asgi_app(client, keys))``).

A request is signed as Standard Webhooks do: ``Awa-Timestamp`` holds unix seconds and
``Awa-Signature`` holds ``v2=<hex>``, where ``<hex>`` is
HMAC-SHA256(key, ``"<timestamp>.<callback_id>.<action>.<raw body>"``): the action is signed,
so a captured heartbeat cannot be replayed to ``/complete`` (architecture §18.4; the old
``v1=`` scheme, without the action, is gone). A key is the secret's text as UTF-8 bytes; the
callback id is signed as it appears in the URL; the timestamp must lie within 300 s of now,
past or future. Several ``v2=`` signatures separated by spaces are accepted (a sender in the
middle of a key rotation may send one per key), and any of the configured keys verifies (the
receiver's side of a rotation: newest first, older still valid).

The ASGI app looks at the headers before it reads a byte of the body: a request without a
well-formed, current ``Awa-Timestamp`` and a ``v2=<64 hex>`` signature, or whose
``Content-Length`` exceeds ``max_body`` (``[serve] max_body``, 1 MiB), is answered at once;
the body is then streamed with that cap (413 beyond it).

:func:`verify` raises :class:`SignatureError` (with the reason) or returns a
:class:`Verified`. The ASGI app answers 200 with the job's JSON, 400 for a body nested too
deeply to parse, 401 for a bad or missing signature, 404 for an unknown or already resolved callback (and for every request when no
key is configured), 409 when the job is not in a resolvable state (or its kind is not
registered in the client's app: see :class:`UnknownKindRefused`), 422 for a bad body, and
500 when a follow-up spec raised (the job keeps waiting, so the sender retries); every error
body is one line of JSON, ``{"error": "..."}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from awa_cli.errors import AwaError, SignatureError, UnknownKindRefused, ValidationError

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from awa_cli.client import AsyncClient
    from awa_cli.jobs import JobRow

log = logging.getLogger("awa.callbacks")

# (actor, action, target, result, detail): detail says which key verified ({"key_index": 0})
AuditFn = Callable[[str, str, str, str, dict[str, Any]], Awaitable[None]]

TIMESTAMP_HEADER = "Awa-Timestamp"
SIGNATURE_HEADER = "Awa-Signature"
TOLERANCE_SECONDS = 300
ACTIONS = ("complete", "fail", "retry", "resume", "heartbeat")
MAX_BODY_BYTES = 1024 * 1024  # the default of [serve] max_body
DEFAULT_HEARTBEAT_TIMEOUT = "1h"  # as `awa callback heartbeat`
MAX_HEARTBEAT_SECONDS = 7 * 86400  # a heartbeat extends the wait by at most a week
SCHEME = "v2="
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Verified:
    """A request that verified: its timestamp and the index of the key that matched
    (0 = the newest; a higher index means the sender still signs with an older key)."""

    timestamp: int
    key_index: int


def _key_bytes(key: str | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    raise TypeError(f"a callback key must be str or bytes, not {type(key).__name__}")


def _body_bytes(body: str | bytes) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else bytes(body)


def _digest(key: bytes, timestamp: int | str, callback_id: str, action: str, body: bytes) -> str:
    message = f"{timestamp}.{callback_id}.{action}.".encode() + body
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _check_action(action: str) -> str:
    if action not in ACTIONS:
        raise ValidationError("action", f"expected one of {', '.join(ACTIONS)}, got {action!r}")
    return action


def sign(
    key: str | bytes,
    callback_id: str | uuid.UUID,
    body: str | bytes,
    timestamp: int | None = None,
    action: str = "complete",
) -> dict[str, str]:
    """The headers that sign ``body`` for ``action`` on ``callback_id`` (``timestamp``: now by
    default): ``Awa-Timestamp`` and ``Awa-Signature: v2=<hex>``."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    signature = _digest(
        _key_bytes(key), ts, str(callback_id), _check_action(action), _body_bytes(body)
    )
    return {TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: f"{SCHEME}{signature}"}


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict is case-sensitive; HTTP header names are not
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def check_headers(headers: Mapping[str, str], *, now: float | None = None) -> tuple[int, list[str]]:
    """The timestamp and the offered ``v2=`` signatures, checked for form and for the 300 s
    window without the body (so a request that cannot verify is refused before it is read).
    Raises :class:`SignatureError`."""
    raw_ts = _header(headers, TIMESTAMP_HEADER)
    if raw_ts is None:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header")
    raw_ts = raw_ts.strip()
    if not raw_ts.isascii() or not raw_ts.isdigit() or len(raw_ts) > 12:
        raise SignatureError(f"malformed {TIMESTAMP_HEADER} header: expected unix seconds")
    timestamp = int(raw_ts)
    current = time.time() if now is None else now
    if abs(current - timestamp) > TOLERANCE_SECONDS:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is more than {TOLERANCE_SECONDS} s from the server's clock"
        )
    raw_sig = _header(headers, SIGNATURE_HEADER)
    if raw_sig is None:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    offered = [
        part[len(SCHEME) :]
        for part in raw_sig.split()[:16]
        if part.startswith(SCHEME) and len(part) == len(SCHEME) + 64 and set(part[3:]) <= _HEX
    ]
    if not offered:
        raise SignatureError(f"malformed {SIGNATURE_HEADER} header: expected v2=<64 hex digits>")
    return timestamp, offered


def verify(
    keys: Sequence[str | bytes],
    callback_id: str | uuid.UUID,
    body: str | bytes,
    headers: Mapping[str, str],
    action: str = "complete",
    *,
    now: float | None = None,
) -> Verified:
    """Check a request's ``Awa-Timestamp`` and ``Awa-Signature`` headers against ``keys``, for
    ``action`` on ``callback_id`` with ``body``.

    Returns a :class:`Verified`; raises :class:`SignatureError` when there is no key, a header
    is missing or malformed, the timestamp is more than 300 s from ``now`` (past or future), or
    no ``v2=`` signature matches any key (one signed for another action or callback does not).
    Comparisons take constant time.
    """
    key_bytes = [_key_bytes(k) for k in keys]
    if not key_bytes:
        raise SignatureError("no callback signing key is configured")
    timestamp, offered = check_headers(headers, now=now)
    payload = _body_bytes(body)
    signed_action = _check_action(action)
    for index, key in enumerate(key_bytes):
        expected = _digest(key, timestamp, str(callback_id), signed_action, payload).encode()
        # Every offered signature is compared (no early exit on the first mismatch).
        matched = False
        for candidate in offered:
            matched |= hmac.compare_digest(expected, candidate.encode("ascii", "replace"))
        if matched:
            return Verified(timestamp, index)
    raise SignatureError("the signature matches no configured key")


def callback_url(base_url: str, callback_id: str | uuid.UUID, action: str = "complete") -> str:
    """The URL an external system POSTs to: ``<base_url>/<callback_id>/<action>``.

    ``base_url`` is the public URL of the callback routes' mount point (for ``awa serve``,
    ``https://host/callbacks``: the ``[serve] callback_base_url`` setting).
    """
    _check_action(action)
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValidationError("callback_base_url", "expected a URL")
    return f"{base_url.strip().rstrip('/')}/{callback_id}/{action}"


def callback_urls(base_url: str, callback_id: str | uuid.UUID) -> tuple[tuple[str, str], ...]:
    """``(action, url)`` for every action (what a ``CallbackToken`` carries)."""
    return tuple((action, callback_url(base_url, callback_id, action)) for action in ACTIONS)


# --- the ASGI app --------------------------------------------------------------------------


class _BadBody(Exception):
    """The request body does not fit the action (answered 422), or cannot be parsed at all
    because it is nested too deeply (answered 400)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


async def check_resolvable(client: AsyncClient, callback_id: str) -> None:
    """Refuse (:class:`UnknownKindRefused`) when the client's app does not know the job's kind;
    CallbackNotFound when nothing waits on ``callback_id``."""
    app = client.app
    if app is None:
        return
    waiting = await client.waiting_job(callback_id)
    if waiting.kind not in app.tasks:
        raise UnknownKindRefused(
            f"job {waiting.id} has kind {waiting.kind!r}, which the loaded app does not "
            "register, so its follow-ups are unknown"
        )


def _error(status: int, message: str) -> Response:
    from starlette.responses import JSONResponse

    line = message.strip().splitlines()[0] if message.strip() else "error"
    return JSONResponse({"error": line[:500]}, status_code=status)


def _parse_body(raw: bytes, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadBody(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise _BadBody("the body is nested too deeply to parse", 400) from None
    if not isinstance(data, dict):
        raise _BadBody("the body must be a JSON object")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        expected = ", ".join(allowed) if allowed else "no keys"
        raise _BadBody(f"unknown key {unknown[0]!r} in the body (expected {expected})")
    return data


def _heartbeat_seconds(data: dict[str, Any]) -> float:
    from awa_cli.config import ConfigError, parse_duration

    try:
        seconds = parse_duration(data.get("timeout", DEFAULT_HEARTBEAT_TIMEOUT), "timeout")
    except ConfigError as exc:
        raise _BadBody(exc.message) from None
    if seconds > MAX_HEARTBEAT_SECONDS:
        raise _BadBody(f"timeout: at most {MAX_HEARTBEAT_SECONDS // 86400} days (7d)")
    return seconds


def _call_for(
    client: AsyncClient, callback_id: str, action: str, raw: bytes
) -> Callable[[], Awaitable[JobRow]]:
    """The client call for ``action`` with the body's values (``_BadBody`` if it does not fit)."""
    match action:
        case "complete":
            payload = _parse_body(raw, ("payload",)).get("payload")
            return lambda: client.complete_external(callback_id, payload)
        case "fail":
            error = _parse_body(raw, ("error",)).get("error")
            if not isinstance(error, str) or not error.strip():
                raise _BadBody('fail needs {"error": "<text>"}')
            return lambda: client.fail_external(callback_id, error)
        case "retry":
            _parse_body(raw, ())
            return lambda: client.retry_external(callback_id)
        case "resume":
            payload = _parse_body(raw, ("payload",)).get("payload")
            return lambda: client.resume_external(callback_id, payload)
        case "heartbeat":
            timeout = _heartbeat_seconds(_parse_body(raw, ("timeout",)))
            return lambda: client.heartbeat_callback(callback_id, timeout)
    raise AssertionError(action)


async def _resolve(client: AsyncClient, callback_id: str, action: str, raw: bytes) -> JobRow:
    """Check the body, then the job's kind, then resolve through the (app-bound) client."""
    call = _call_for(client, callback_id, action, raw)
    if action != "heartbeat":  # a heartbeat changes no state and runs no follow-ups
        await check_resolvable(client, callback_id)
    return await call()


def status_of(
    exc: BaseException,
    not_found: tuple[type[BaseException], ...] = (),
    conflict: tuple[type[BaseException], ...] = (),
) -> int:
    """The documented HTTP status of an error from a request, shared by these routes and the
    dashboard's (``serve/common.status_for``): 404 for a missing callback or one of
    ``not_found``, 409 for a job in the wrong state, refused or one of ``conflict``, 422 for
    invalid input, 503 while the database is unreachable, else 500 (a failing follow-up
    spec included)."""
    import psycopg

    from awa_cli.errors import CallbackNotFound, InvalidJobState

    if isinstance(exc, (CallbackNotFound, *not_found)):
        return 404
    if isinstance(exc, (InvalidJobState, UnknownKindRefused, *conflict)):
        return 409
    if isinstance(exc, ValidationError):
        return 422
    if isinstance(exc, psycopg.OperationalError):
        return 503
    return 500


def _status_for(exc: Exception) -> int:
    """The documented status for an error of the resolution."""
    return exc.status if isinstance(exc, _BadBody) else status_of(exc)


class _Endpoint:
    """``POST /{callback_id}/{action}``: check the headers, read the body (capped), verify,
    then parse, resolve and answer."""

    def __init__(
        self,
        client: AsyncClient,
        keys: Sequence[str | bytes],
        audit: AuditFn | None,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.client = client
        self.keys = [_key_bytes(k) for k in keys]
        self.audit = audit
        self.max_body = max_body

    async def handle(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not self.keys:
            return _error(404, "HTTP callbacks are not enabled (no callback_secrets configured)")
        callback_id = str(request.path_params["callback_id"])
        action = str(request.path_params["action"])
        if action not in ACTIONS:
            return _error(404, f"unknown callback action {action!r}")
        try:  # the headers first: nothing is read for a request that cannot verify
            check_headers(request.headers)
        except SignatureError as exc:
            log.warning("action=callback_refused reason=signature callback=%r", callback_id[:64])
            return _error(401, str(exc))
        raw = await read_capped(request, self.max_body)
        if raw is None:
            return _error(413, f"the body is larger than {self.max_body} bytes")
        try:
            verified = verify(self.keys, callback_id, raw, request.headers, action)
        except SignatureError as exc:
            log.warning("action=callback_refused reason=signature callback=%r", callback_id[:64])
            return _error(401, str(exc))
        try:
            uuid.UUID(callback_id)
        except ValueError:
            return _error(404, "unknown callback")
        detail = {"key_index": verified.key_index}
        try:
            row = await _resolve(self.client, callback_id, action, raw)
        except Exception as exc:  # every failure is answered with its documented status
            response = self._failed(exc, callback_id, action)
            await self._audit(callback_id, action, f"error: {response.status_code}", detail)
            return response
        await self._audit(callback_id, action, "ok", detail)
        log.info(
            "action=callback_resolved callback=%s verb=%s job=%d key_index=%d",
            callback_id,
            action,
            row.id,
            verified.key_index,
        )
        return JSONResponse(row.to_json())

    async def _audit(
        self, callback_id: str, action: str, result: str, detail: dict[str, Any]
    ) -> None:
        if self.audit is not None:
            target = f"callback:{callback_id}"
            await self.audit("callback", f"callback.{action}", target, result, detail)

    @staticmethod
    def _failed(exc: Exception, callback_id: str, action: str) -> Response:
        status = _status_for(exc)
        expected = isinstance(exc, (AwaError, _BadBody)) or status == 503
        if expected:
            log.warning(
                "action=callback_failed callback=%s verb=%s status=%d", callback_id, action, status
            )
            message = "database unavailable" if status == 503 else str(exc)
        else:
            log.exception("action=callback_error callback=%s verb=%s", callback_id, action)
            message = f"internal error ({type(exc).__name__})"
        return _error(status, message)


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The raw body, or None when its ``Content-Length`` or the bytes streamed exceed
    ``limit`` (refused before reading when the length is declared)."""
    declared = request.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _http_error(request: Request, exc: Exception) -> Response:
    from starlette.exceptions import HTTPException

    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return _error(status, str(detail))


def asgi_app(
    client: AsyncClient,
    keys: Sequence[str | bytes],
    *,
    audit: AuditFn | None = None,
    max_body: int = MAX_BODY_BYTES,
) -> Starlette:
    """The callback routes as a Starlette app, to mount anywhere (routes are relative to the
    mount point): ``POST /{callback_id}/complete|fail|retry|resume|heartbeat``.

    ``client`` should be bound to the application's ``App`` (``AsyncClient(dsn, app=app)``),
    so follow-up specs commit with the resolution and hooks fire; ``keys`` are the signing
    secrets, newest first (none: every request answers 404). The client is opened on first
    use and stays the caller's to close. ``audit(actor, action, target, result, detail)``, if
    given, is awaited for every verified request (``awa serve`` passes its audit seam;
    ``detail`` holds ``key_index``). A body over ``max_body`` bytes answers 413.
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    endpoint = _Endpoint(client, keys, audit, max_body)
    return Starlette(
        routes=[Route("/{callback_id}/{action}", endpoint.handle, methods=["POST"])],
        exception_handlers={HTTPException: _http_error},
    )


__all__ = [
    "ACTIONS",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE_SECONDS",
    "SignatureError",
    "UnknownKindRefused",
    "Verified",
    "asgi_app",
    "callback_url",
    "callback_urls",
    "check_headers",
    "check_resolvable",
    "sign",
    "verify",
]
