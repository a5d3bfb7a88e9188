"""The man pages, generated: ``awa(1)``, one ``awa-GROUP(1)`` per command, ``awa.toml(5)``.

The command pages come from the click tree (help texts, options, subcommands); ``awa.toml(5)``
from the config schema (keys and defaults, :mod:`awa_cli.config`) and the comments of
``awa.toml.example`` (the documented reference). Output is deterministic: no dates, no
versions. The pages are checked in under ``man/`` and shipped in the package as
``awa_cli/man/``; a test fails when they are stale.

    python -m awa_cli.manpages                  # regenerate man/ in the checkout
    python -m awa_cli.manpages --check          # exit 1 if man/ is stale
    python -m awa_cli.manpages --install DIR    # copy the shipped pages to DIR/man1, DIR/man5
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

CHECKOUT = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIG = CHECKOUT / "awa.toml.example"
REGENERATE = "python -m awa_cli.manpages"
MANUAL = '"" "awa" "awa manual"'  # date, source, manual: no date, so output never drifts


# --- roff --------------------------------------------------------------------------------------


def escape(text: str, *, verbatim: bool = False) -> str:
    """Text safe for roff: backslashes, hyphens as minus signs, inline `code` in bold."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return text if verbatim else re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)


def lines_of(text: str, *, verbatim: bool = False) -> list[str]:
    """Escaped lines; one starting with a control character is protected."""
    return [
        ("\\&" + line if line.startswith((".", "'")) else line)
        for line in escape(text, verbatim=verbatim).split("\n")
    ]


def paragraphs(text: str) -> list[str]:
    """Click help text as roff paragraphs: blank lines separate them, ``\\b`` keeps lines."""
    text = inspect.cleandoc(text.split("\f")[0])
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        if not block.strip():
            continue
        if out:
            out.append(".PP")
        if block.startswith("\b"):
            out += [".nf", *lines_of(block.lstrip("\b").strip("\n")), ".fi"]
        else:
            out += lines_of(" ".join(line.strip() for line in block.splitlines()))
    return out


def option_tag(spec: str) -> str:
    """``-v, --verbose`` / ``--queue NAME[=N]`` as bold names and italic values."""
    parts = []
    for alternative in spec.split(", "):
        words = alternative.split(" ", 1)
        tag = f"\\fB{escape(words[0])}\\fR"
        if len(words) > 1:
            tag += f" \\fI{escape(words[1])}\\fR"
        parts.append(tag)
    return ", ".join(parts)


def header(name: str, section: int, summary: str) -> list[str]:
    summary = summary.rstrip(".")
    return [
        f".TH {escape(name.upper())} {section} {MANUAL}",
        ".SH NAME",
        f"{escape(name)} \\- {escape(summary)}",
    ]


# --- the command pages -----------------------------------------------------------------------


EXIT_STATUS = [
    ("0", "Success."),
    (
        "1",
        (
            "The operation failed: the database is unreachable, a follow-up spec raised, a "
            "resolution was refused."
        ),
    ),
    (
        "2",
        "Usage, config or validation error: bad JSON, a malformed callback id, a value out of range.",
    ),
    ("4", "The job, callback or periodic job was not found."),
]

ENVIRONMENT = [
    ("AWA_CONFIG", "The config file when --config is not given (default ./awa.toml)."),
    (
        "AWA_DATABASE_URL",
        (
            "The PostgreSQL URL when --database-url is not given; it takes "
            "precedence over [database] url."
        ),
    ),
    ("NO_COLOR", "When set, no colours."),
    (
        "NOTIFY_SOCKET",
        (
            "Set by systemd for Type=notify services: awa worker reports READY, "
            "STATUS, STOPPING and, with WATCHDOG_USEC, WATCHDOG pings."
        ),
    ),
]


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    out: list[str] = []
    for param in command.get_params(ctx):
        if isinstance(param, click.Argument):
            continue  # named in the synopsis
        record = param.get_help_record(ctx)
        if record is None:
            continue
        spec, text = record
        out += [".TP", option_tag(spec), *lines_of(" ".join(text.split()))]
    return out


def _usage(command: click.Command, ctx: click.Context) -> str:
    return " ".join(command.collect_usage_pieces(ctx))


def _synopsis(path: list[str], command: click.Command, ctx: click.Context) -> list[str]:
    words = " ".join(path[1:])
    return [
        ".SH SYNOPSIS",
        ".B awa",
        f"[\\fIGLOBAL OPTIONS\\fR] \\fB{escape(words)}\\fR {escape(_usage(command, ctx))}",
    ]


def _subcommands(
    group: click.Group, ctx: click.Context, path: list[str]
) -> Iterator[tuple[list[str], click.Command, click.Context]]:
    """Every command under ``group``, depth first, in name order."""
    for name in sorted(group.list_commands(ctx)):
        sub = group.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        sub_ctx = click.Context(sub, info_name=name, parent=ctx)
        yield [*path, name], sub, sub_ctx
        if isinstance(sub, click.Group):
            yield from _subcommands(sub, sub_ctx, [*path, name])


def _common_sections(see_also: list[str]) -> list[str]:
    out = [".SH EXIT STATUS"]
    for code, text in EXIT_STATUS:
        out += [".TP", f".B {code}", *lines_of(text)]
    out += [
        ".SH SEE ALSO",
        ", ".join(f"\\fB{escape(page[:-3])}\\fR{page[-3:]}" for page in see_also),
    ]
    return out


def command_page(name: str, command: click.Command, root_ctx: click.Context) -> str:
    ctx = click.Context(command, info_name=name, parent=root_ctx)
    path = ["awa", name]
    out = header(f"awa-{name}", 1, command.get_short_help_str(limit=1000))
    out += _synopsis(path, command, ctx)
    out += [".SH DESCRIPTION", *paragraphs(command.help or "")]
    options = _options(command, ctx)
    if options:
        out += [".SH OPTIONS", *options]
    if isinstance(command, click.Group):
        out.append(".SH COMMANDS")
        for sub_path, sub, sub_ctx in _subcommands(command, ctx, path):
            out += [f'.SS "{escape(" ".join(sub_path))} {escape(_usage(sub, sub_ctx))}"']
            out += paragraphs(sub.help or sub.short_help or "")
            out += _options(sub, sub_ctx)
    out += [
        ".SH GLOBAL OPTIONS",
        (
            "See \\fBawa\\fR(1): \\-\\-config, \\-\\-database\\-url, "
            "\\-\\-json, \\-\\-no\\-color, \\-v, \\-q."
        ),
    ]
    out += _common_sections(["awa(1)", "awa.toml(5)"])
    return "\n".join(out) + "\n"


def root_page(cli: click.Group, root_ctx: click.Context, names: list[str]) -> str:
    out = header("awa", 1, cli.get_short_help_str(limit=1000).removeprefix("awa: "))
    out += [".SH SYNOPSIS", ".B awa", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]..."]
    out += [".SH DESCRIPTION", *paragraphs(cli.help or "")]
    out += [".SH OPTIONS", *_options(cli, root_ctx)]
    out.append(".SH COMMANDS")
    for name in names:
        command = cli.get_command(root_ctx, name)
        assert command is not None
        out += [
            ".TP",
            f"\\fBawa\\-{escape(name)}\\fR(1)",
            *lines_of(command.get_short_help_str(limit=1000)),
        ]
    out.append(".SH ENVIRONMENT")
    for variable, text in ENVIRONMENT:
        out += [".TP", f".B {variable}", *lines_of(text)]
    out += [
        ".SH FILES",
        ".TP",
        ".I ./awa.toml",
        "The default config file; see \\fBawa.toml\\fR(5).",
    ]
    out += _common_sections([f"awa-{name}(1)" for name in names] + ["awa.toml(5)"])
    return "\n".join(out) + "\n"


# --- awa.toml(5) -----------------------------------------------------------------------------


@dataclass
class ConfigDoc:
    """What awa.toml.example says: the file's preamble, each table's and each key's comment."""

    preamble: list[str] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)
    keys: dict[tuple[str, str], str] = field(default_factory=dict)


# A table header, also commented out (``# [periodic.nightly_report]``: an example to copy).
_TABLE_LINE = re.compile(r"(?:#\s*)?\[([^\]]+)\]\s*$")
_KEY_LINE = re.compile(r"#?\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


def _table_name(raw: str) -> str:
    for prefix in ("queues.", "periodic.", "limits."):
        if raw.startswith(prefix):
            return f"{prefix}NAME"
    return raw


# Shown as the default of a key that has none and must be given.
REQUIRED = object()


def parse_example(text: str) -> ConfigDoc:
    doc = ConfigDoc()
    comment: list[str] = []
    table: str | None = None
    last_key: str | None = None  # the key on the line just above, for keys sharing a comment
    for line in text.splitlines():
        stripped = line.strip()
        table_match = _TABLE_LINE.fullmatch(stripped)
        key_match = _KEY_LINE.match(stripped)
        if table_match:
            table = _table_name(table_match.group(1))
            if comment:
                doc.tables.setdefault(table, " ".join(comment))
            comment, last_key = [], None
        elif (
            table is not None
            and key_match
            and (not stripped.startswith("#") or comment or last_key)
        ):
            key = key_match.group(1)
            described = " ".join(comment) if comment else doc.keys.get((table, last_key or ""))
            if described:
                doc.keys.setdefault((table, key), described)
            comment, last_key = [], key
        elif table is None and stripped == "#" and comment:  # a paragraph break in the preamble
            doc.preamble.append(" ".join(comment))
            comment = []
        elif stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            last_key = None
        else:  # a blank line ends a comment
            if table is None and comment:
                doc.preamble.append(" ".join(comment))
            comment, last_key = [], None
    return doc


def config_reference() -> list[tuple[str, list[tuple[str, Any, str | None]]]]:
    """(table, [(key, default, description or None)]) in config.py's order."""
    from awa_cli.config import EMBEDDED_DIR_NAME, Config, DatabaseConfig

    defaults = Config(
        path=None, base_dir=Path("."), database=DatabaseConfig(embedded_dir=Path(EMBEDDED_DIR_NAME))
    ).to_display_dict(human_durations=True)
    doc = parse_example(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    out = []
    for table, values in defaults.items():
        if not isinstance(values, dict):
            continue  # path, base_dir
        if table == "queues":
            table, values = "queues.NAME", next(iter(values.values()))
        elif table == "periodic":
            table, values = "periodic.NAME", _periodic_defaults()
        elif table == "limits":  # kind or queue (one of them), key and max_running required
            table = "limits.NAME"
            values = {"kind": None, "queue": None, "key": REQUIRED, "max_running": REQUIRED}
            values["rate"] = None
        out.append(
            (table, [(key, value, doc.keys.get((table, key))) for key, value in values.items()])
        )
    return out


def _periodic_defaults() -> dict[str, Any]:
    """The keys of a ``[periodic.NAME]`` table with their defaults (REQUIRED for none)."""
    from dataclasses import MISSING, fields

    from awa_cli.config import PeriodicConfig

    out: dict[str, Any] = {}
    for f in fields(PeriodicConfig):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = REQUIRED
    return out


def _toml_value(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def _default_text(value: Any) -> str:
    return "required" if value is REQUIRED else f"default: {escape(_toml_value(value))}"


def config_page() -> str:
    doc = parse_example(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    out = header("awa.toml", 5, "configuration of the awa CLI and worker")
    out += [
        ".SH SYNOPSIS",
        "\\fI./awa.toml\\fR, \\fB$AWA_CONFIG\\fR, or \\fBawa \\-\\-config\\fR \\fIPATH\\fR",
    ]
    out.append(".SH DESCRIPTION")
    for index, text in enumerate(doc.preamble[1:]):  # the first is the title NAME gives
        if index:
            out.append(".PP")
        out += lines_of(text)
    out += [
        ".PP",
        (
            "Unknown tables and keys, wrong types and out\\-of\\-range values are errors "
            "naming the key; \\fBawa config check\\fR validates a file."
        ),
    ]
    out.append(".SH TABLES")
    for table, keys in config_reference():
        out.append(f".SS [{escape(table)}]")
        if table in doc.tables:
            out += lines_of(doc.tables[table])
        for key, default, description in keys:
            out += [".TP", f"\\fB{escape(key)}\\fR ({_default_text(default)})"]
            out += lines_of(description or "Undocumented: see awa.toml.example.")
    example = EXAMPLE_CONFIG.read_text(encoding="utf-8").strip("\n")
    out += [".SH EXAMPLE", ".nf", *lines_of(example, verbatim=True), ".fi"]
    out += [".SH SEE ALSO", "\\fBawa\\fR(1), \\fBawa\\-config\\fR(1), \\fBawa\\-worker\\fR(1)"]
    return "\n".join(out) + "\n"


# --- all pages, writing, checking ------------------------------------------------------------


def generate() -> dict[str, str]:
    """Relative path (``man1/awa.1``) → page text, for every page."""
    from awa_cli.cli import cli

    root_ctx = click.Context(cli, info_name="awa", **cli.context_settings)
    commands = {
        name: cli.get_command(root_ctx, name) for name in sorted(cli.list_commands(root_ctx))
    }
    shown = {name: c for name, c in commands.items() if c is not None and not c.hidden}
    pages = {"man1/awa.1": root_page(cli, root_ctx, list(shown))}
    for name, command in shown.items():
        pages[f"man1/awa-{name}.1"] = command_page(name, command, root_ctx)
    pages["man5/awa.toml.5"] = config_page()
    return pages


def stale(directory: Path, pages: dict[str, str]) -> list[str]:
    """Pages missing, different or extra in ``directory``."""
    on_disk = {str(p.relative_to(directory)) for p in directory.glob("man[0-9]/*.[0-9]")}
    differ = [
        rel
        for rel, text in pages.items()
        if not (directory / rel).is_file() or (directory / rel).read_text(encoding="utf-8") != text
    ]
    return sorted(set(differ) | (on_disk - set(pages)))


def write(directory: Path, pages: dict[str, str]) -> None:
    for stale_page in set(directory.glob("man[0-9]/*.[0-9]")) - {directory / r for r in pages}:
        stale_page.unlink()
    for rel, text in pages.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text, encoding="utf-8")


def shipped_pages() -> Path:
    """The pages installed with the package (``awa_cli/man``), or the checkout's ``man/`` in a
    development install."""
    from importlib import resources

    shipped = Path(str(resources.files("awa_cli"))) / "man"
    return shipped if shipped.is_dir() else CHECKOUT / "man"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=REGENERATE, description="Generate or install awa's man pages."
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=CHECKOUT / "man",
        help="where to write (default: the checkout's man/)",
    )
    parser.add_argument(
        "--check", action="store_true", help="only report stale pages; exit 1 if any"
    )
    parser.add_argument(
        "--install",
        type=Path,
        metavar="DIR",
        help="copy the shipped pages to DIR/man1 and DIR/man5",
    )
    args = parser.parse_args(argv)
    if args.install:
        source = shipped_pages()
        for page in sorted(source.glob("man[0-9]/*.[0-9]")):
            target = args.install / page.parent.name / page.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
            print(target)
        return 0
    pages = generate()
    if args.check:
        outdated = stale(args.output, pages)
        for rel in outdated:
            print(f"stale: {args.output / rel}", file=sys.stderr)
        return 1 if outdated else 0
    write(args.output, pages)
    for rel in pages:
        print(args.output / rel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
