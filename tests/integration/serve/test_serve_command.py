"""`awa serve` as a command: the real process answers its health checks; bad setups exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from awa_cli.cli import cli
from awa_cli.commands.serve import check_host, is_loopback
from tests.helpers import ROOT

ENV = {"NO_COLOR": "1", "COLUMNS": "120"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def spawn_serve(dsn: str, cwd: Path, port: int, stdout: int) -> subprocess.Popen[str]:
    """A real `awa serve --port PORT` with no config file in reach, stderr piped."""
    env = {**os.environ, **ENV, "AWA_DATABASE_URL": dsn, "PYTHONPATH": str(ROOT)}
    env.pop("AWA_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "awa_cli", "serve", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.integration
def test_the_real_process_answers_healthz_and_readyz(dsn: str, tmp_path: Path) -> None:
    port = free_port()
    proc = spawn_serve(dsn, tmp_path, port, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = get(f"http://127.0.0.1:{port}/healthz")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "awa serve did not come up"
                time.sleep(0.1)
        assert (status, body) == (200, {"status": "ok"})
        assert get(f"http://127.0.0.1:{port}/readyz") == (200, {"status": "ok"})
        assert get(f"http://127.0.0.1:{port}/api/stats")[0] == 200  # no tokens: loopback is open
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert f"awa serve on http://127.0.0.1:{port}" in stderr
    assert "HTTP callbacks are off: no [serve] callback_secrets configured" in stderr


def invoke(tmp_path: Path, *args: str, toml: str = "", env: dict[str, str] | None = None) -> object:
    config = tmp_path / "awa.toml"
    config.write_text(toml)
    return CliRunner().invoke(
        cli,
        ["--config", str(config), "--database-url", "postgresql://unused@127.0.0.1:1/x", *args],
        env={**ENV, **(env or {})},
    )


def test_a_public_host_without_tokens_is_refused(tmp_path: Path) -> None:
    result = invoke(tmp_path, "serve", "--host", "0.0.0.0")
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("Error: --host 0.0.0.0: not a loopback address")
    check_host("0.0.0.0", has_tokens=False, read_only=True, callbacks_only=False)
    check_host("0.0.0.0", has_tokens=True, read_only=False, callbacks_only=False)
    check_host("::1", has_tokens=False, read_only=False, callbacks_only=False)
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")


def test_tokens_and_secrets_come_from_the_environment(tmp_path: Path) -> None:
    toml = '[serve]\ntokens = { ops = { token_env = "AWA_TEST_OPS", role = "operator" } }\n'
    missing = invoke(tmp_path, "serve", toml=toml)
    assert missing.exit_code == 2
    assert (
        "[serve.tokens.ops] token_env: environment variable AWA_TEST_OPS is not set"
        in missing.output
    )
    short = invoke(tmp_path, "serve", toml=toml, env={"AWA_TEST_OPS": "tiny"})
    assert short.exit_code == 2 and "shorter than 16" in short.output and "tiny" not in short.output
    keys = '[serve]\ncallback_secrets = ["AWA_TEST_KEY"]\n'
    result = invoke(tmp_path, "serve", toml=keys)
    assert (
        result.exit_code == 2
        and "callback_secrets[0]: environment variable AWA_TEST_KEY" in result.output
    )
    bad = invoke(
        tmp_path, "serve", toml='[serve]\ntokens = { ops = { token_env = "X", role = "admin" } }\n'
    )
    assert (
        bad.exit_code == 2 and "[serve.tokens.ops] role: expected viewer or operator" in bad.output
    )
