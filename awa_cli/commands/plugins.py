"""`awa plugins`: the loaded plugins, where each came from, and the hooks it implements."""

from __future__ import annotations

import click

from awa_cli.commands.context import CliContext, json_option, pass_context


@click.command(name="plugins")
@json_option
@pass_context
def command(ctx: CliContext, json_flag: bool) -> None:
    """List the loaded plugins: built-ins, entry points (group "awa_cli"), then [app] plugins.

    A plugin that failed to load is listed with its error (stderr, one line each, even with
    -q; in the table too); so is an awa_ name a plugin defines that is no hook. The command
    still exits 0.
    """
    problems: list[str] = []
    host = ctx.load_plugins(report=problems.append)  # printed below, once, even under -q
    if ctx.wants_json(json_flag):
        ctx.terminal.json([plugin.to_json() for plugin in host.loaded])
    else:
        rows = [(p.name, p.origin, ", ".join(p.hooks)) for p in host.loaded]
        rows += [(f.name, f.origin, f"FAILED: {f.error}") for f in host.failed]
        ctx.terminal.table(("name", "origin", "hooks"), rows)
    for problem in problems:
        ctx.terminal.err.print(problem, markup=False, highlight=False)
