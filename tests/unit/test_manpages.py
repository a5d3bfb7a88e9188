"""The man pages: generated from the click tree and the config reference, checked in under
man/, current, renderable, and shipped in the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import click
import pytest

from awa_cli import manpages
from awa_cli.cli import cli
from tests.helpers import ROOT, build_wheel, run_captured

MAN = ROOT / "man"


def test_checked_in_pages_are_current() -> None:
    outdated = manpages.stale(MAN, manpages.generate())
    assert not outdated, (
        f"man pages out of date: {', '.join(outdated)}; regenerate with `{manpages.REGENERATE}`"
    )


def test_generation_is_deterministic() -> None:
    assert manpages.generate() == manpages.generate()


def test_every_command_group_has_a_page() -> None:
    pages = manpages.generate()
    ctx = click.Context(cli, info_name="awa")
    for name in cli.list_commands(ctx):
        page = pages[f"man1/awa-{name}.1"]
        assert page.startswith(f".TH AWA\\-{name.upper()} 1 ")
        assert f"\\fBawa\\-{name}\\fR(1)" in pages["man1/awa.1"]
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):  # every subcommand is described on the group's page
            for sub in command.list_commands(ctx):
                assert f'.SS "awa {name} {sub} ' in page
    assert "man5/awa.toml.5" in pages


def test_every_config_key_is_documented_in_the_example() -> None:
    undocumented = [
        f"[{table}] {key}"
        for table, keys in manpages.config_reference()
        for key, _, description in keys
        if not description
    ]
    assert not undocumented, f"describe these in awa.toml.example: {undocumented}"


def test_config_page_shows_keys_and_defaults() -> None:
    page = manpages.config_page()
    assert ".SS [worker]" in page and ".SS [queues.NAME]" in page
    assert '\\fBshutdown_timeout\\fR (default: "30s")' in page
    assert "\\fBprometheus_port\\fR (default: unset)" in page


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_pages_render_without_warnings() -> None:
    for page in sorted(MAN.glob("man[0-9]/*.[0-9]")):
        proc = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        )
        assert proc.returncode == 0 and not proc.stderr, (page.name, proc.stderr)


def test_check_and_install_from_the_command_line(tmp_path: Path) -> None:
    check = subprocess.run(
        [sys.executable, "-m", "awa_cli.manpages", "--check", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert check.returncode == 1 and "stale:" in check.stderr
    install = subprocess.run(
        [sys.executable, "-m", "awa_cli.manpages", "--install", str(tmp_path / "share")],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert install.returncode == 0, install.stderr
    assert (tmp_path / "share/man1/awa-worker.1").read_text() == (
        MAN / "man1/awa-worker.1"
    ).read_text()
    assert (tmp_path / "share/man5/awa.toml.5").is_file()


def test_wheel_ships_the_man_pages(tmp_path: Path) -> None:
    """Build the wheel, unpack it as an install would, install the pages from it."""
    wheel = build_wheel(tmp_path, timeout=120)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(site)
    expected = {f"awa_cli/man/{p.relative_to(MAN)}" for p in MAN.glob("man[0-9]/*.[0-9]")}
    assert expected and expected <= names, sorted(expected - names)
    # awa serve's templates and stylesheet ride in the same wheel (checked here: one build).
    serve = ROOT / "awa_cli" / "serve"
    assets = {f"awa_cli/serve/{p.relative_to(serve)}" for p in serve.glob("templates/*.html")}
    assets |= {"awa_cli/serve/static/awa.css", "awa_cli/db/sql/inspect.sql"}
    assert len(assets) > 3 and assets <= names, sorted(assets - names)

    env = {**os.environ, "PYTHONPATH": str(site)}
    install = run_captured(
        [sys.executable, "-m", "awa_cli.manpages", "--install", str(tmp_path / "share")],
        env=env,
        cwd=tmp_path,
        timeout=30,
    )
    assert install.returncode == 0, install.stderr
    assert install.stdout.split() == [
        str(tmp_path / "share" / p.removeprefix("awa_cli/man/")) for p in sorted(expected)
    ]
