"""Connection strings: redaction for anything shown to people."""

from __future__ import annotations

import re

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_URL_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@?#]*:)(?P<pw>[^@/?#]*)(?P<tail>@)", re.I
)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def redact(dsn: str) -> str:
    """The DSN with any password replaced by ``***``, in URL or key=value form."""
    text = _URL_PASSWORD.sub(r"\g<head>***\g<tail>", dsn)
    text = re.sub(r"([?&]password=)[^&#]*", r"\1***", text, flags=re.I)
    return _KV_PASSWORD.sub(r"\1***", text)


def with_options(dsn: str, **options: str) -> str:
    """The DSN with extra connection parameters (e.g. application_name)."""
    params = conninfo_to_dict(dsn)
    for key, value in options.items():
        if key == "options" and params.get("options"):
            params["options"] = f"{params['options']} {value}"  # server settings add up
        else:
            params.setdefault(key, value)
    return make_conninfo(**params)  # type: ignore[arg-type]
