"""Enqueue spans for an application that traces with OpenTelemetry itself (a web app with
the SDK configured), with no ``[telemetry]`` of awa's: every ``awa.insert`` and
``AsyncClient`` / ``Client`` insert records an ``awa.enqueue <kind>`` span under the current
span, with the application's global tracer provider, and stores its ``awa.traceparent``.

Nothing is imported until the application has imported ``opentelemetry.trace`` itself
(:func:`awa_cli.metadata.set_ambient`), so an application without OpenTelemetry pays one
``sys.modules`` lookup per insert. With no SDK provider set (OpenTelemetry's default no-op or
proxy provider), and while awa's own OpenTelemetry plugin runs in the process (a worker with
``[telemetry]``), it records nothing.
"""

from __future__ import annotations

from typing import Any

from awa_cli import metadata


def _loader() -> Any:
    from awa_cli.plugins.otel import ambient_contributor

    return ambient_contributor()


def install() -> None:
    """Called once when awa_cli is imported."""
    metadata.set_ambient(_loader)
