"""Where logs, metrics and traces are put together: the one observer `signoff serve` gives its runner."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from signoff.bot.observe.logs import LogObserver
from signoff.bot.observe.metrics import Metrics
from signoff.bot.observe.trace_settings import trace_exporters
from signoff.extras import install_extra
from signoff.runtime.records import RunRecord
from signoff.runtime.telling_ports import Observer

if TYPE_CHECKING:
    from signoff.bot.observe.traces import Traces

log = logging.getLogger("signoff.bot.observe")


class Observers:
    """Several observers as one: each sees every commit, and one that fails keeps it from none of the others."""

    def __init__(self, observers: Iterable[Observer]) -> None:
        self.observers = tuple(observers)

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        for observer in self.observers:
            try:
                observer.observe(run, events)
            except Exception as exc:  # a broken exporter must not silence the logs, nor the logs the metrics
                log.warning("run %s: %s failed: %s: %s", run.run_id, type(observer).__name__, type(exc).__name__, exc)


@dataclass
class Observation:
    """How a served app watches its runs: the story in the log, the metrics it serves, its traces."""

    metrics: Metrics
    traces: Traces | None
    observer: Observers

    def close(self) -> None:
        """Send the traces still buffered (at the end of the process)."""
        if self.traces is not None:
            self.traces.shutdown()


def serve_observation(environ: Mapping[str, str], extra: Iterable[Observer] = ()) -> Observation:
    """Logs and metrics always; traces when the `OTEL_*` variables in `environ` ask for them (and
    `signoff[otel]` is installed); `extra` observers after them (an embedding program's, a test's)."""
    metrics = Metrics()
    traces = _traces(environ)
    observers: list[Observer] = [LogObserver(), metrics, *([traces] if traces is not None else []), *extra]
    return Observation(metrics, traces, Observers(observers))


def _traces(environ: Mapping[str, str]) -> Traces | None:
    if not trace_exporters(environ):
        return None  # not configured: OpenTelemetry is not even imported
    try:
        from signoff.bot.observe.traces import traces_from_env
    except ImportError as exc:
        log.warning("OTEL_* asks for traces, but OpenTelemetry is not installed (%s): %s; serving without traces",
                    exc, install_extra("otel"))
        return None
    return traces_from_env(environ)
