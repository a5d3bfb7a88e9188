"""`awa serve`: the dashboard, the admin API and the HTTP callback routes (architecture §12).

Loads the configured app and plugins (so a dashboard action or a callback runs the app's
follow-ups in its transaction and fires hooks here), reads the tokens and signing keys from
the environment variables ``[serve]`` names, refuses a non-loopback ``--host`` without tokens
(unless ``--read-only`` or ``--callbacks-only``), and runs uvicorn until SIGINT/SIGTERM.
"""

from __future__ import annotations

import ipaddress
import signal
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from awa_cli.commands.context import CliContext, pass_context
from awa_cli.config import ConfigError, ServeConfig

if TYPE_CHECKING:
    from awa_cli.serve.app import ServeSettings

MIN_SECRET_LENGTH = 16
MIN_DISTINCT_CHARACTERS = 8  # 'a' * 16 or '0123' * 4 is not a secret


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _secret(env: Mapping[str, str], name: str, key: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(f"{key}: environment variable {name} is not set", key=key)
    if len(value) < MIN_SECRET_LENGTH:
        raise ConfigError(
            f"{key}: the value of {name} is shorter than {MIN_SECRET_LENGTH} characters", key=key
        )
    if len(set(value)) < MIN_DISTINCT_CHARACTERS:
        raise ConfigError(
            f"{key}: the value of {name} is too weak: it has fewer than "
            f"{MIN_DISTINCT_CHARACTERS} different characters (make one with "
            "`openssl rand -hex 32`)",
            key=key,
        )
    return value


def read_tokens(serve: ServeConfig, env: Mapping[str, str]) -> list[Any]:
    """The configured bearer tokens, read from their environment variables."""
    from awa_cli.serve.auth import Token

    tokens: list[Token] = []
    seen: dict[str, str] = {}
    for entry in serve.tokens:
        key = f"[serve.tokens.{entry.name}] token_env"
        value = _secret(env, entry.token_env, key)
        if value in seen:
            raise ConfigError(f"{key}: the same token as [serve.tokens.{seen[value]}]", key=key)
        seen[value] = entry.name
        tokens.append(Token(entry.name, entry.role, value.encode("utf-8")))
    return tokens


def read_callback_keys(serve: ServeConfig, env: Mapping[str, str]) -> list[bytes]:
    return [
        _secret(env, name, f"[serve] callback_secrets[{index}]").encode("utf-8")
        for index, name in enumerate(serve.callback_secrets)
    ]


def check_allowed_hosts(serve: ServeConfig, *, has_tokens: bool, read_only: bool) -> None:
    """``allowed_hosts`` opens the dashboard to other names, which is for token mode (a
    read-only or callbacks-only server without tokens may name them too)."""
    if serve.allowed_hosts and not has_tokens and not read_only:
        raise ConfigError(
            "[serve] allowed_hosts: needs [serve] tokens (without them awa serve answers only "
            "loopback names), or --read-only / --callbacks-only",
            key="[serve] allowed_hosts",
        )


def check_host(host: str, *, has_tokens: bool, read_only: bool, callbacks_only: bool) -> None:
    if has_tokens or read_only or callbacks_only or is_loopback(host):
        return
    raise ConfigError(
        f"--host {host}: not a loopback address, and no [serve] tokens are configured; "
        "configure tokens, or add --read-only (or --callbacks-only)",
        key="--host",
    )


def access_line(host: str, port: int, *, tokens: int, callbacks_only: bool) -> str:
    """What the start line says about who may use this server (true in every mode)."""
    if tokens:
        return f"{tokens} token(s)"
    if is_loopback(host):
        return "no tokens: open to this host only"
    if callbacks_only:
        return "no tokens: only the signed callback routes and the health checks are served"
    return f"no tokens: WARNING every client that can reach {host}:{port} can read all job data"


def _announce(
    ctx: CliContext,
    host: str,
    port: int,
    tokens: int,
    keys: list[bytes],
    read_only: bool,
    callbacks_only: bool,
    serve: ServeConfig,
) -> None:
    status = ctx.terminal.status
    flags = "".join(
        f" {flag}"
        for flag, on in (("--read-only", read_only), ("--callbacks-only", callbacks_only))
        if on
    )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    access = access_line(host, port, tokens=tokens, callbacks_only=callbacks_only)
    status(f"awa serve on {url}{flags} ({access})")
    names = ", ".join(("loopback names with the port", *serve.allowed_hosts))
    status(f"answers Host: {names}; any other name is refused (421)")
    if keys:
        status(f"HTTP callbacks on at {url}/callbacks/ ({len(keys)} signing key(s))")
    else:
        status("HTTP callbacks are off: no [serve] callback_secrets configured")


@click.command(name="serve")
@click.option(
    "--host", metavar="HOST", help="Address to listen on (default: [serve] host, 127.0.0.1)."
)
@click.option(
    "--port", type=click.IntRange(1, 65535), help="Port to listen on (default: [serve] port, 8477)."
)
@click.option(
    "--callbacks-only", is_flag=True, help="Serve only /callbacks/* and the health checks."
)
@click.option(
    "--read-only", is_flag=True, help="Refuse every action (403): a dashboard to look at."
)
@click.option(
    "--forwarded-allow-ips",
    metavar="IPS",
    help="Comma-separated addresses of reverse proxies whose X-Forwarded-Proto and "
    "X-Forwarded-For are trusted (cookies are then Secure when the proxy says https; "
    "default: [serve] forwarded_allow_ips, none).",
)
@pass_context
def command(
    ctx: CliContext,
    host: str | None,
    port: int | None,
    callbacks_only: bool,
    read_only: bool,
    forwarded_allow_ips: str | None,
) -> None:
    """Run the dashboard, the admin API and the signed HTTP callback routes.

    One server (Starlette on uvicorn) with the configured app and plugins loaded, so an action
    taken here or a callback received here runs the app's follow-up specs in the same
    transaction and fires its hooks, as `awa callback` does.

    Pages: / (counts per queue and state, the oldest available job, the last hour's throughput),
    /jobs (filter by state, kind, queue and tag; find by id; newest first, paginated by id),
    /jobs/ID (args, metadata, errors, output, the callback and its URLs; cancel, retry, resolve
    the callback), /queues (pause state, counts per state; pause, resume), /dlq and /dlq/ID
    (dead letters and their depth; retry, purge), /periodic (schedules, last and next fire;
    pause, resume, trigger), /workers (live worker processes), /kinds (kinds live workers run;
    kinds with ready jobs and no live worker flagged), /audit (the audit log). JSON: GET
    /api/stats, /api/jobs?state=&kind=&queue=&tag=&limit=&before=, /api/jobs/ID, /api/queues,
    /api/dlq?queue=&kind=&limit=, /api/dlq/ID, /api/periodic, /api/workers, /api/kinds,
    /api/audit?actor=&action=&target=&since=&limit=; POST /api/jobs/ID/cancel|retry,
    /api/queues/QUEUE/pause|resume, /api/dlq/ID/retry|purge and
    /api/periodic/NAME/pause|resume|trigger. Health: /healthz (the process is up) and /readyz (the database answers
    and the schema is current).

    Host: every request must name this server: a loopback name with its port, or one of
    [serve] allowed_hosts (token mode); any other Host answers 421, so a web page that
    rebinds its own name to 127.0.0.1 gets nothing.

    Auth: with no [serve] tokens, awa serve listens on loopback only (another --host is refused
    unless --read-only or --callbacks-only) and the local browser may act. With tokens, every
    request but the health checks and /callbacks/* needs `Authorization: Bearer TOKEN` or the
    session cookie of the /login form (a server-side session: logout ends it, so do 30 idle
    minutes and 8 hours; /login allows 5 failures per client, then one try per 10 s, counted
    at /metrics); role viewer reads, operator also acts. Form posts carry a CSRF token bound
    to the session; --read-only refuses every action with 403. Cookies are Secure (and
    __Host-) with [serve] secure_cookies or behind a --forwarded-allow-ips proxy that says
    https. Request bodies above [serve] max_body (1 MiB) answer 413. Every action, and every post the
    guard refuses, is recorded in awa.audit_log (actor serve:TOKEN-NAME, result ok, refused or
    failed) and shown at /audit.

    HTTP callbacks: POST /callbacks/ID/complete|fail|retry|resume|heartbeat, signed with one of
    the keys named by [serve] callback_secrets (headers Awa-Timestamp and Awa-Signature, see
    awa.toml(5) and the README). With no keys they answer 404.

    Stops gracefully on SIGINT or SIGTERM (exit 0); exit 2 for a bad setup (an unset token
    variable, a public --host without tokens), 1 when it cannot listen.
    """
    from awa_cli.client import AsyncClient
    from awa_cli.serve.app import build_app

    serve = ctx.config.serve
    host = host or serve.host
    port = port or serve.port
    tokens = read_tokens(serve, ctx.env)
    keys = read_callback_keys(serve, ctx.env)
    check_host(host, has_tokens=bool(tokens), read_only=read_only, callbacks_only=callbacks_only)
    check_allowed_hosts(serve, has_tokens=bool(tokens), read_only=read_only or callbacks_only)
    forwarded = forwarded_allow_ips or serve.forwarded_allow_ips
    app = ctx.app if ctx.config.app.modules else None
    client = AsyncClient(ctx.dsn(), app, plugin_hooks=ctx.plugins.event_hooks())
    settings = _settings(serve, tokens, keys, read_only, callbacks_only, forwarded)
    settings = replace(settings, configured_queues=tuple(sorted(ctx.config.queues)))
    _announce(ctx, host, port, len(tokens), keys, read_only, callbacks_only, serve)
    if app is None:
        ctx.terminal.status(
            "no [app] modules: actions and callbacks run without follow-ups or hooks"
        )
    _run(build_app(client, settings), host, port, ctx.verbose)


def _settings(
    serve: ServeConfig,
    tokens: list[Any],
    keys: list[bytes],
    read_only: bool,
    callbacks_only: bool,
    forwarded: str | None,
) -> ServeSettings:
    from awa_cli.serve.app import ServeSettings

    return ServeSettings(
        tokens,
        keys,
        read_only=read_only,
        callbacks_only=callbacks_only,
        callback_base_url=serve.callback_base_url,
        allowed_hosts=serve.allowed_hosts,
        secure_cookies=serve.secure_cookies,
        forwarded_allow_ips=forwarded,
        max_body=serve.max_body,
    )


def _run(asgi: Any, host: str, port: int, verbose: int) -> None:
    """Serve until SIGINT/SIGTERM (exit 0); exit 1 when uvicorn could not listen."""
    import uvicorn

    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_level="debug" if verbose > 1 else "info" if verbose else "warning",
        access_log=verbose > 0,
        server_header=False,
        proxy_headers=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM/SIGINT once it has shut down gracefully, through the handlers
    # it found; these no-ops make a graceful stop exit 0 instead of dying of the signal.
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stops}
    try:
        server.run()
    except SystemExit:  # uvicorn exits 3 when it cannot bind (it logged why): awa's code is 1
        if server.started:
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        raise click.exceptions.Exit(1)
