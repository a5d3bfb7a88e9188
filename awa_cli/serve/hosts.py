"""Which ``Host`` names ``awa serve`` answers for (DNS rebinding refused: architecture §18.4).

A page on another site that rebinds its own name to 127.0.0.1 makes the browser send that
name as ``Host``; refusing every name that is not this server's stops it before
authentication. Allowed: a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``, any
loopback address) *with this server's port*, and each ``[serve] allowed_hosts`` entry
(``name`` for any port, ``name:port`` for that one; names compare without case). The health
checks also answer a bare IP address, as an orchestrator's probe sends (no rebinding page can
send an address as its Host).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, MutableMapping
from typing import Any

HEALTH_PATHS = ("/healthz", "/readyz")
MISDIRECTED = "this server does not answer for that Host (see [serve] allowed_hosts)"


def split_host(value: str) -> tuple[str, int | None] | None:
    """``(name, port)`` of a ``Host`` header (port ``None`` when absent); None if malformed."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/\\@ \t?#"):
        return None
    if value.startswith("["):
        name, sep, rest = value.partition("]")
        name += sep
        if not sep or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else ""
    else:
        name, _, port_text = value.partition(":")
        if ":" in port_text:
            return None
    if not port_text:
        return name, None
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        return None
    return name, int(port_text)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def is_loopback_name(name: str) -> bool:
    address = _address(name)
    return name == "localhost" if address is None else address.is_loopback


class HostCheck:
    """The allow-list: loopback names with the server's port, plus ``allowed_hosts``."""

    def __init__(self, allowed_hosts: Iterable[str] = ()) -> None:
        self.entries: list[tuple[str, int | None]] = []
        for entry in allowed_hosts:
            parsed = split_host(entry)
            if parsed is not None:
                self.entries.append(parsed)

    def allows(self, scope: MutableMapping[str, Any], host_header: str | None) -> bool:
        parsed = split_host(host_header or "")
        if parsed is None:
            return False
        name, port = parsed
        if port is None:
            port = 443 if scope.get("scheme") in ("https", "wss") else 80
        for allowed_name, allowed_port in self.entries:
            if name == allowed_name and allowed_port in (None, port):
                return True
        server = scope.get("server")
        server_port = server[1] if server and len(server) > 1 else None
        if is_loopback_name(name) and (server_port is None or port == server_port):
            return True
        return scope.get("path") in HEALTH_PATHS and _address(name) is not None
