"""Which trace exporters the standard `OTEL_*` variables ask for, read without importing OpenTelemetry
(so a process that exports no traces never loads it). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from signoff.runtime.errors import ConfigError

EXPORTERS = ("otlp", "console", "none")
"""The values of OTEL_TRACES_EXPORTER Signoff knows."""


def trace_exporters(environ: Mapping[str, str]) -> list[str]:
    """The exporters to send traces with: OTEL_TRACES_EXPORTER's (`none` left out), or `otlp` when only
    an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); none when
    OTEL_SDK_DISABLED is true. Raises `ConfigError` for an exporter Signoff does not know."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if not names and (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        names = ["otlp"]
    unknown = sorted(set(names) - set(EXPORTERS))
    if unknown:
        raise ConfigError(f"OTEL_TRACES_EXPORTER: Signoff sends traces with otlp or console (or none), "
                          f"not {', '.join(unknown)}")
    return [name for name in dict.fromkeys(names) if name != "none"]
