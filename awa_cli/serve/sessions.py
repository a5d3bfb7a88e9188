"""Server-side login sessions and the login throttle of ``awa serve`` (architecture §18.4).

A session is a random id (the cookie's value) mapped here to the token's name: logout
deletes it, it ends after ``idle`` seconds without a request and ``lifetime`` seconds after
login whatever happens, and a restart ends them all. They live in this process, which is
sound because ``awa serve`` is one process (uvicorn, one worker) that already holds the only
copy of its per-process key; replicas behind a load balancer need sticky sessions, or bearer
tokens (docs/security.md).

The throttle counts failed logins per client address: after ``free`` failures in a row a
client gets one try per ``interval`` seconds until it logs in. Both tables are bounded (the
oldest entries are dropped first), so no client can grow them without limit.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

SESSION_IDLE = 30 * 60
SESSION_LIFETIME = 8 * 3600
MAX_SESSIONS = 10_000
THROTTLE_FREE = 5
THROTTLE_INTERVAL = 10.0
MAX_CLIENTS = 10_000


@dataclass
class Session:
    sid: str
    name: str
    created: float
    seen: float


@dataclass(eq=False)
class SessionStore:
    """The live sessions: ``create``, ``get`` (which refreshes the idle clock), ``revoke``."""

    idle: float = SESSION_IDLE
    lifetime: float = SESSION_LIFETIME
    limit: int = MAX_SESSIONS
    _sessions: OrderedDict[str, Session] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def create(self, name: str) -> Session:
        now = time.monotonic()
        session = Session(secrets.token_urlsafe(32), name, now, now)
        self._sessions[session.sid] = session
        while len(self._sessions) > self.limit:
            self._sessions.popitem(last=False)
        return session

    def get(self, sid: str) -> Session | None:
        session = self._sessions.get(sid)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.seen > self.idle or now - session.created > self.lifetime:
            del self._sessions[sid]
            return None
        session.seen = now
        self._sessions.move_to_end(sid)
        return session

    def revoke(self, sid: str | None) -> bool:
        return sid is not None and self._sessions.pop(sid, None) is not None

    def __len__(self) -> int:
        return len(self._sessions)


@dataclass
class _Client:
    failures: int = 0
    last: float = 0.0


@dataclass(eq=False)
class LoginThrottle:
    """Failed logins per client: ``wait(client)`` is how many seconds it must wait before
    its next try (0: it may try now)."""

    free: int = THROTTLE_FREE
    interval: float = THROTTLE_INTERVAL
    limit: int = MAX_CLIENTS
    failures_total: int = field(default=0, init=False)  # awa_serve_login_failures_total
    throttled_total: int = field(default=0, init=False)  # awa_serve_login_throttled_total
    _clients: OrderedDict[str, _Client] = field(default_factory=OrderedDict, init=False, repr=False)

    def wait(self, client: str) -> float:
        entry = self._clients.get(client)
        if entry is None or entry.failures < self.free:
            return 0.0
        remaining = entry.last + self.interval - time.monotonic()
        if remaining > 0:
            self.throttled_total += 1
            return remaining
        return 0.0

    def failed(self, client: str) -> None:
        self.failures_total += 1
        entry = self._clients.pop(client, None) or _Client()
        entry.failures += 1
        entry.last = time.monotonic()
        self._clients[client] = entry
        while len(self._clients) > self.limit:
            self._clients.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)
