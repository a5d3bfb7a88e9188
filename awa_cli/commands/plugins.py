"""`awa plugins`: the loaded plugins, where each came from, and the hooks it implements."""

from __future__ import annotations

import click

from awa_cli.commands.context import CliContext, json_option, pass_context


@click.command(name="plugins")
@json_option
@pass_context
def command(ctx: CliContext, json_flag: bool) -> None:
    """List the loaded plugins: built-ins, entry points (group "awa_cli"), then [app] plugins.

    A plugin that failed to load is reported on stderr; the command still exits 0.
    """
    host = ctx.plugins
    if ctx.wants_json(json_flag):
        ctx.terminal.json([plugin.to_json() for plugin in host.loaded])
    else:
        ctx.terminal.table(
            ("name", "origin", "hooks"),
            [(p.name, p.origin, ", ".join(p.hooks)) for p in host.loaded],
        )
    if host.failed:
        # Each failure was reported in full when the plugins loaded (unless -q); this
        # summary names them even under -q.
        names = ", ".join(f"{f.name} ({f.origin})" for f in host.failed)
        ctx.terminal.err.print(
            f"{len(host.failed)} plugin(s) failed to load: {names}", markup=False, highlight=False
        )
