"""Who is asking, and may they: the Host, bearer tokens, the login session, roles, CSRF —
applied once.

:class:`Guard` is an ASGI middleware wrapped around the whole ``awa serve`` app; routes never
check auth themselves, they read the :class:`Principal` the guard put in the scope.

* ``Host``: a request for a name this server does not answer for is refused first, 421
  (:mod:`awa_cli.serve.hosts`: loopback names with the port, and ``[serve] allowed_hosts``).
* Public: ``/healthz``, ``/readyz``, ``/static/*``, ``/login`` and ``/callbacks/*`` (signed
  requests, see :mod:`awa_cli.callbacks`).
* No tokens configured (loopback only, enforced by ``awa serve``): everyone is the
  ``anonymous`` operator (a viewer with ``--read-only``).
* Tokens configured: ``Authorization: Bearer <token>`` or the session cookie the login form
  sets (a random id of a server-side session, :mod:`awa_cli.serve.sessions`: logout ends it,
  so do 30 idle minutes, 8 hours and a restart). Otherwise an HTML GET is sent to ``/login``
  and anything else answers 401.
* A ``POST`` is an action: it needs the operator role, and ``--read-only`` refuses it (403) —
  except ``/login`` and ``/logout``, which any caller may post. Its body is read with the
  ``[serve] max_body`` cap (413), whoever sends it.
* CSRF: a request not authenticated by a bearer header (a browser's) must carry the CSRF
  token (form field ``csrf`` or header ``X-CSRF-Token``): an HMAC of the session's id for a
  signed-in browser (so a planted cookie cannot stand in for it), of the browser's
  ``awa_csrf`` cookie otherwise (the login form, open mode). A ``POST`` to ``/api/`` whose
  media type is exactly ``application/json`` is accepted without it, since no other site can
  send one without a CORS preflight (which awa never answers), unless its ``Origin`` names
  another host.
* Cookies are ``Secure`` and take the ``__Host-`` prefix when ``[serve] secure_cookies`` is
  on or the request came over https (directly, or from a proxy ``--forwarded-allow-ips``
  trusts); every response but ``/static/*`` is ``Cache-Control: no-store``.

Tokens are compared in constant time against every configured token; no token, cookie or
key is ever logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from awa_cli.serve.hosts import MISDIRECTED, HostCheck
from awa_cli.serve.sessions import LoginThrottle, SessionStore

log = logging.getLogger("awa.serve")

VIEWER = "viewer"
OPERATOR = "operator"
SESSION_COOKIE = "awa_session"
CSRF_COOKIE = "awa_csrf"
SECURE_PREFIX = "__Host-"  # a cookie only this origin, over https, with Path=/ may set
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 8 * 3600  # the cookie's Max-Age: the server-side session's lifetime
MAX_FORM_BYTES = 1024 * 1024  # the default of [serve] max_body
PUBLIC_PATHS = ("/healthz", "/readyz", "/login")
PUBLIC_PREFIXES = ("/static/", "/callbacks/")
NON_ACTION_POSTS = ("/login", "/logout")  # may be posted by any caller (CSRF still applies)
MUTATING_METHODS = ("POST", "PUT", "PATCH", "DELETE")
PRINCIPAL_KEY = "awa.principal"
CSRF_KEY = "awa.csrf"
SESSION_KEY = "awa.session"  # the session id of a signed-in browser's request
SECURE_KEY = "awa.secure"  # whether this request's cookies are Secure (and __Host-)
CSP = (
    "default-src 'self'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'; object-src 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Principal:
    """The caller: ``name`` (the token's name, or ``anonymous``), ``role``, and ``via``
    (``bearer``, ``session`` or ``open``)."""

    name: str
    role: str
    via: str

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return f"serve:{self.name}"

    @property
    def can_act(self) -> bool:
        return self.role == OPERATOR


@dataclass(frozen=True)
class Token:
    """A configured bearer token (``secret`` never appears in its repr)."""

    name: str
    role: str
    secret: bytes = field(repr=False)


class Policy:
    """The configured tokens and modes; authenticates requests, keeps the sessions and the
    login throttle, and makes CSRF tokens."""

    def __init__(
        self,
        tokens: list[Token],
        *,
        read_only: bool = False,
        allowed_hosts: tuple[str, ...] | list[str] = (),
        secure_cookies: bool = False,
        max_body: int = MAX_FORM_BYTES,
    ) -> None:
        self.tokens = tokens
        self.read_only = read_only
        self.secure_cookies = secure_cookies
        self.max_body = max_body
        self.hosts = HostCheck(allowed_hosts)
        self.sessions = SessionStore()
        self.throttle = LoginThrottle()
        self.key = secrets.token_bytes(32)  # per process: a restart ends every session

    @property
    def open(self) -> bool:
        """No tokens: every caller is ``anonymous`` (awa serve then binds loopback only)."""
        return not self.tokens

    def is_secure(self, scope: Scope) -> bool:
        """Whether this request's cookies are ``Secure`` (``[serve] secure_cookies``, or https
        as the server, or a proxy it trusts, saw it)."""
        return self.secure_cookies or scope.get("scheme") == "https"

    def match_token(self, offered: str) -> Token | None:
        """The token equal to ``offered``. Digests are compared (equal lengths, so the time
        taken says nothing about a token's length), every configured token each time."""
        found = None
        candidate = hashlib.sha256(offered.encode("utf-8", "replace")).digest()
        for token in self.tokens:
            if hmac.compare_digest(hashlib.sha256(token.secret).digest(), candidate):
                found = token
        return found

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self.key, f"{purpose}.{value}".encode(), hashlib.sha256).hexdigest()

    def session_cookie(self, token: Token) -> str:
        """Start a server-side session for ``token``; the cookie's value is its id."""
        return self.sessions.create(token.name).sid

    def read_session(self, cookie: str) -> Principal | None:
        session = self.sessions.get(cookie) if 0 < len(cookie) <= 128 else None
        if session is None:
            return None
        # The role is looked up now, not kept from the login.
        token = next((t for t in self.tokens if t.name == session.name), None)
        return None if token is None else Principal(token.name, token.role, "session")

    def csrf_for(self, seed: str) -> str:
        return self._mac("csrf", seed)

    def csrf_for_session(self, sid: str) -> str:
        return self._mac("csrf-session", sid)

    def authenticate(
        self, headers: dict[str, str], cookies: dict[str, str], scope: Scope | None = None
    ) -> Principal | None:
        if self.open:
            return Principal("anonymous", VIEWER if self.read_only else OPERATOR, "open")
        scheme, _, offered = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and offered.strip():
            token = self.match_token(offered.strip())
            return None if token is None else Principal(token.name, token.role, "bearer")
        secure = self.is_secure(scope) if scope is not None else False
        cookie = cookies.get(cookie_name(SESSION_COOKIE, secure))
        principal = self.read_session(cookie) if cookie else None
        if principal is not None and scope is not None:
            scope[SESSION_KEY] = cookie
        return principal


def cookie_name(base: str, secure: bool) -> str:
    """``awa_session`` / ``awa_csrf``, or their ``__Host-`` names when cookies are Secure."""
    return f"{SECURE_PREFIX}{base}" if secure else base


def media_type(content_type: str) -> str:
    """``application/json`` of ``Application/JSON; charset=utf-8`` (compared exactly)."""
    return content_type.split(";", 1)[0].strip().lower()


def _cookies(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in raw.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name not in out:
            out[name] = value.strip()
    return out


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES) or path == "/callbacks"


async def _respond(send: Send, status: int, body: dict[str, Any] | None, **headers: str) -> None:
    payload = json.dumps(body).encode() if body is not None else b""
    raw_headers = [(b"content-type", b"application/json")]  # security headers: see _with_headers
    raw_headers += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    raw_headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


async def _read_all(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def form_fields(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (the last value of a name wins)."""
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in parsed.items()}


class Guard:
    """The ASGI middleware that authenticates, authorises and checks CSRF for every request."""

    def __init__(
        self,
        app: ASGIApp,
        policy: Policy,
        audit: Callable[[str, str, str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.policy = policy
        self.audit = audit  # (actor, action, target, result): a refused action is recorded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # none are served; one added later must be guarded
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        cookies = _cookies(headers.get("cookie", ""))
        send = self._with_headers(send, scope, cookies)
        if not self.policy.hosts.allows(scope, headers.get("host")):
            log.warning("action=host_refused path=%s", path[:200])
            await _respond(send, 421, {"error": MISDIRECTED})
            return
        if is_public(path) and path != "/login":
            await self.app(scope, receive, send)
            return
        principal = self.policy.authenticate(headers, cookies, scope)
        if SESSION_KEY in scope:  # a signed-in browser: its CSRF token is bound to the session
            scope[CSRF_KEY] = self.policy.csrf_for_session(str(scope[SESSION_KEY]))
        if principal is None and path != "/login":
            await self._unauthenticated(scope, send, path)
            return
        scope[PRINCIPAL_KEY] = principal
        if scope["method"] in MUTATING_METHODS:
            checked = await self._checked_action(scope, receive, send, headers, principal)
            if checked is None:
                return
            receive = checked
        await self.app(scope, receive, send)

    async def _checked_action(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        principal: Principal | None,
    ) -> Receive | None:
        """The role, the body's size (read with the cap, whoever sends it) and, for a browser,
        the CSRF token; None once a refusal is answered."""
        path = scope["path"]
        refusal = self._refusal(principal, path)
        if refusal is not None:
            if self.audit is not None:
                actor = principal.actor if principal is not None else "serve:unknown"
                await self.audit(actor, "request", f"{scope['method']} {path}", "error: 403")
            await _respond(send, refusal[0], {"error": refusal[1]})
            return None
        body = await read_capped(receive, headers, self.policy.max_body)
        if body is None:
            await _respond(send, 413, {"error": "request body too large"})
            return None
        if (principal is None or principal.via != "bearer") and not self._csrf_ok(
            scope, headers, body
        ):
            log.warning("action=csrf_refused path=%s", path)
            await _respond(send, 403, {"error": "missing or invalid CSRF token"})
            return None
        return _replay(body)

    def _refusal(self, principal: Principal | None, path: str) -> tuple[int, str] | None:
        if path in NON_ACTION_POSTS:
            return None
        if self.policy.read_only:
            return 403, "awa serve runs --read-only: actions are refused"
        if principal is None or not principal.can_act:
            return 403, "this action needs the operator role"
        return None

    def _csrf_ok(self, scope: Scope, headers: dict[str, str], body: bytes) -> bool:
        """A valid CSRF token passes (whatever a reverse proxy did to Host); without one, only
        a JSON post to /api/ from this origin (or from no browser at all) passes."""
        content_type = media_type(headers.get("content-type", ""))
        offered = headers.get(CSRF_HEADER, "")
        if not offered and content_type == "application/x-www-form-urlencoded":
            offered = form_fields(body).get(CSRF_FIELD, "")
        if offered:
            expected = str(scope[CSRF_KEY]).encode()
            return hmac.compare_digest(offered.encode("utf-8", "replace"), expected)
        origin = headers.get("origin")
        if origin and urlsplit(origin).netloc != headers.get("host", ""):
            return False
        return scope["path"].startswith("/api/") and content_type == "application/json"

    async def _unauthenticated(self, scope: Scope, send: Send, path: str) -> None:
        wants_html = not path.startswith("/api/") and scope["method"] == "GET"
        if wants_html:
            query = scope.get("query_string", b"").decode("latin-1")
            target = path + (f"?{query}" if query else "")
            await _respond(send, 303, None, location=f"/login?next={quote(target, safe='')}")
            return
        await _respond(send, 401, {"error": "authentication required"}, www_authenticate="Bearer")

    def _with_headers(self, send: Send, scope: Scope, cookies: dict[str, str]) -> Send:
        """Security headers on every response (``no-store`` but on ``/static/``, HSTS over
        https); a CSRF cookie for a browser that has none."""
        secure = self.policy.is_secure(scope)
        scope[SECURE_KEY] = secure
        name = cookie_name(CSRF_COOKIE, secure)
        seed = cookies.get(name, "")
        fresh = not (16 <= len(seed) <= 128)
        if fresh:
            seed = secrets.token_urlsafe(32)
        scope[CSRF_KEY] = self.policy.csrf_for(seed)
        flags = "; Secure" if secure else ""
        cookie = f"{name}={seed}; Path=/; HttpOnly; SameSite=Strict{flags}"
        extra = list(SECURITY_HEADERS)
        if not scope["path"].startswith("/static/"):
            extra.append((b"cache-control", b"no-store"))
        if scope.get("scheme") == "https":
            extra.append((b"strict-transport-security", b"max-age=31536000"))

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                added = extra + ([(b"set-cookie", cookie.encode())] if fresh else [])
                existing = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in added if k == b"set-cookie" or k not in existing
                ]
            await send(message)

        return wrapped


async def read_capped(receive: Receive, headers: dict[str, str], limit: int) -> bytes | None:
    """A request's whole body, or None when its ``Content-Length`` (checked before reading)
    or the bytes streamed exceed ``limit``."""
    declared = headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        return None
    return await _read_all(receive, limit)


def session_cookie_header(policy: Policy, token: Token, secure: bool) -> str:
    """Start a session for ``token``: the ``Set-Cookie`` value that carries its id."""
    flags = "; Secure" if secure else ""
    value = policy.session_cookie(token)
    return (
        f"{cookie_name(SESSION_COOKIE, secure)}={value}; Path=/; HttpOnly; SameSite=Strict; "
        f"Max-Age={SESSION_SECONDS}{flags}"
    )


def clear_session_header(secure: bool = False) -> str:
    flags = "; Secure" if secure else ""
    name = cookie_name(SESSION_COOKIE, secure)
    return f"{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{flags}"


def end_session(policy: Policy, scope: Scope) -> bool:
    """Logout: the server forgets this request's session (its cookie is then worthless)."""
    return policy.sessions.revoke(scope.get(SESSION_KEY))
