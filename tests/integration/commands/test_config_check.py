"""`awa config check` imports the app as the worker does (issue 28, trial D11) and prints
every table it resolved (D15): a missing `[app] modules` entry or a bad `App.periodic(...)` in
the code is exit 2 naming the key, and the text output shows `[dead_letter]`, `[telemetry]`
and each `[limits.NAME]`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import Result

from awa_cli import limits
from awa_cli.cli import cli
from tests.helpers import AwaRunner

GOOD_APP = """
import awa_cli as awa

app = awa.App()


@app.task(dict, kind="sync_account")
async def sync_account(job):
    pass
"""


def check(config: Path, *args: str) -> Result:
    return AwaRunner().invoke(cli, ["--config", str(config), "config", "check", *args])


def one_error_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def module_name() -> str:
    return f"cfgapp_{uuid.uuid4().hex[:8]}"  # fresh: no module cached in sys.modules


def test_a_missing_app_module_is_exit_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "awa.toml"
    config.write_text('[app]\nmodules = ["myapp.jobz"]\n')
    result = check(config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "[app] modules" in line and "myapp.jobz" in line
    assert "config OK" not in result.output


def test_a_bad_periodic_in_the_code_is_exit_2(tmp_path: Path) -> None:
    name = module_name()
    (tmp_path / f"{name}.py").write_text(
        GOOD_APP + '\napp.periodic("nightly", "0 25 * * *", {}, kind="sync_account")\n'
    )
    config = tmp_path / "awa.toml"
    config.write_text(f'[app]\nmodules = ["{name}"]\n')
    result = check(config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "nightly" in line and "config OK" not in result.output


def test_a_good_app_is_imported_and_every_table_printed(tmp_path: Path) -> None:
    name = module_name()
    (tmp_path / f"{name}.py").write_text(GOOD_APP)
    config = tmp_path / "awa.toml"
    config.write_text(
        f'[app]\nmodules = ["{name}"]\n'
        "[dead_letter]\ndefault = true\n"
        '[telemetry]\nservice_name = "billing"\n'
        '[limits.per_tenant]\nkind = "sync_account"\nkey = "args.tenant_id"\nmax_running = 2\n'
    )
    result = check(config)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for table in ("[dead_letter]", "[telemetry]", "[limits.per_tenant]"):
        assert table in out, out
    assert 'key = "args.tenant_id"' in out and "max_running = 2" in out
    assert 'service_name = "billing"' in out
    assert "config OK" in result.stderr


@pytest.mark.skipif(
    not hasattr(limits, "validate_limits"), reason="limits validation (issue 29) not merged yet"
)
@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('kind = "sync_acount"\nkey = "args.tenant_id"', "kind"),
        ('kind = "sync_account"\nkey = "args.tenantid"', "key"),
    ],
)
def test_a_limit_that_does_not_fit_the_app_is_exit_2(
    tmp_path: Path, table: str, named: str
) -> None:
    name = module_name()
    (tmp_path / f"{name}.py").write_text(
        "from dataclasses import dataclass\nimport awa_cli as awa\napp = awa.App()\n"
        "@dataclass\nclass Sync:\n    tenant_id: str\n"
        '@app.task(Sync, kind="sync_account")\nasync def sync_account(job):\n    pass\n'
    )
    config = tmp_path / "awa.toml"
    config.write_text(
        f'[app]\nmodules = ["{name}"]\n[limits.per_tenant]\n{table}\nmax_running = 2\n'
    )
    result = check(config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "[limits.per_tenant]" in line and named in line
