"""OpenTelemetry traces, with the optional extra `signoff[otel]` and the standard `OTEL_*` variables;
without either, nothing here runs and nothing is imported.

One trace per run, whichever replica drives it and however long it waits:

    signoff.run                 the run, from its creation to its end (done, cancelled, expired)
      chat <model>              each model call (GenAI semantic conventions: gen_ai.request.model,
                                gen_ai.usage.input_tokens, gen_ai.usage.output_tokens, ...)
      execute_tool <tool>       each tool execution
      await_approval <tool>     each wait for people on an approval, from the request to the decision
      await_person <status>     each wait of a stopped run (out of budget, ...) for someone's request
      stopped <status>          the moment a run stopped short (a mark, of no duration)

A span is made when what it describes is committed, with the times that took: none is held open
across a pause, a restart or another replica. The trace id, and the run span's id, are derived
from the run id, so a span made hours later on another replica still finds its run.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from signoff.bot.observe.commits import ModelTurn, ending, model_turn, provider_and_model, seconds
from signoff.bot.observe.trace_settings import trace_exporters
from signoff.extras import install_extra
from signoff.runtime.errors import ConfigError
from signoff.runtime.records import RunRecord
from signoff.runtime.schema import STOPPED, TERMINAL

log = logging.getLogger("signoff.bot.observe.traces")

INSTRUMENTATION = "signoff"

_CHOSEN_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("signoff_span_ids",
                                                                                      default=None)


class RunIds(IdGenerator):
    """Random ids, except for the run span being made, whose ids are the ones derived from its run."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        chosen = _CHOSEN_IDS.get()
        return chosen[0] if chosen is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        chosen = _CHOSEN_IDS.get()
        return chosen[1] if chosen is not None else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True  # derived ids are a hash's bits, as uniform as random ones


def run_ids(run_id: str) -> tuple[int, int]:
    """(trace id, run span id) of a run: the same in every process."""
    digest = hashlib.sha256(f"signoff.run:{run_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def tracer_provider(processors: Iterable[SpanProcessor], *, service_name: str | None = "signoff") -> TracerProvider:
    """A provider that sends spans to `processors`. The resource and the sampler are the SDK's
    from `OTEL_*` (OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, ...); `service_name` is used
    unless OTEL_SERVICE_NAME says otherwise (None: leave it to the SDK)."""
    resource = Resource.create({})
    if service_name and str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))  # OTEL_* named no service
    provider = TracerProvider(resource=resource, id_generator=RunIds())
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def traces_from_env(environ: Mapping[str, str]) -> Traces | None:
    """Traces as the standard variables configure them (`trace_settings.trace_exporters`), sent in
    batches; None when they configure none. The OTLP exporter reads its own OTEL_EXPORTER_OTLP_*."""
    exporters = [_exporter(name, environ) for name in trace_exporters(environ)]
    if not exporters:
        return None
    return Traces(tracer_provider([BatchSpanProcessor(exporter) for exporter in exporters]))


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol != "http/protobuf":
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: Signoff sends OTLP as http/protobuf, not {protocol}")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError("OTEL_TRACES_EXPORTER=otlp: the OTLP exporter is not installed; "
                          f"{install_extra('otel')}") from None
    return OTLPSpanExporter()


class Traces:
    """The observer that makes each run's spans (see the module docstring)."""

    def __init__(self, provider: TracerProvider, clock: Callable[[], int] = time.time_ns) -> None:
        self.provider, self.clock = provider, clock
        self.tracer = provider.get_tracer(INSTRUMENTATION)
        self._last_step: dict[str, int] = {}
        """When this process last committed a step of each run that is running: where its next model
        call began. Forgotten when the run pauses or ends, so it holds only runs being driven here."""
        self._lock = threading.Lock()

    def observe(self, run: RunRecord, events: Sequence[Mapping[str, Any]]) -> None:
        now = self.clock()
        steps = any("step" in event for event in events)  # the loop's own events: a step was committed
        with self._lock:
            began = self._last_step.pop(run.run_id, None) if steps else None
            if steps and run.status == "running":
                self._last_step[run.run_id] = now
        parent = trace.set_span_in_context(NonRecordingSpan(_run_span_context(run.run_id)))
        tools_took = 0
        for event in events:
            kind = event["type"]
            if kind in ("tool_executed", "tool_failed") and not event.get("reconciled"):
                took = int(seconds(event.get("seconds")) * 1e9)
                tools_took += took
                self._tool_span(run, event, parent, now - took, now)
            elif kind in ("approval_recorded", "approval_expired") and "waited_seconds" in event:
                self._approval_span(run, event, parent, now - int(seconds(event["waited_seconds"]) * 1e9), now)
            elif kind == "command_recorded" and run.status in STOPPED:
                self._span(f"await_person {run.status}", parent, _ns(run.updated_at), now, {
                    "signoff.run_id": run.run_id, "signoff.status": run.status, "signoff.command": event.get("op"),
                    "signoff.by": event.get("by")})
        turn = model_turn(run, events)
        if turn is not None:
            ended = now - tools_took  # the calls in its turn ran after it
            self._model_span(run, turn, parent, began if began is not None and began <= ended else ended, ended)
        for event in events:
            status = ending(event)
            if status in TERMINAL:
                self._run_span(run, status, event, now)
            elif status is not None:
                self._span(f"stopped {status}", parent, now, now, {
                    "signoff.run_id": run.run_id, "signoff.status": status, "signoff.reason": event.get("reason")})

    def shutdown(self) -> None:
        """Send what is buffered and stop (at the end of the process)."""
        self.provider.shutdown()

    # -- the spans -------------------------------------------------------------------------------

    def _model_span(self, run: RunRecord, turn: ModelTurn, parent: Any, start: int, end: int) -> None:
        provider, model = provider_and_model(turn.model)
        attributes = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.system": provider,
            "gen_ai.request.model": model, "gen_ai.usage.input_tokens": turn.input_tokens,
            "gen_ai.usage.output_tokens": turn.output_tokens, "signoff.run_id": run.run_id,
            "signoff.step": turn.step, "signoff.cost_usd": turn.cost_usd, "signoff.outcome": turn.outcome,
            "signoff.said": turn.said,
        }
        error = turn.said if turn.outcome == "error" else None
        self._span(f"chat {model}", parent, start, end, attributes, kind=SpanKind.CLIENT, error=error)

    def _tool_span(self, run: RunRecord, event: Mapping[str, Any], parent: Any, start: int, end: int) -> None:
        tool, ok = str(event.get("tool")), event["type"] == "tool_executed"
        error = None if ok else "timeout" if str(event.get("error") or "").startswith("timeout:") else "tool_error"
        self._span(f"execute_tool {tool}", parent, start, end, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "signoff.run_id": run.run_id,
            "signoff.key": event.get("key"), "signoff.side_effect": bool(event.get("side_effect")),
            "signoff.outcome": "ok" if ok else error}, error=error)

    def _approval_span(self, run: RunRecord, event: Mapping[str, Any], parent: Any, start: int, end: int) -> None:
        outcome = ("expired" if event["type"] == "approval_expired" else
                   "approved" if event.get("approved") else "denied")
        self._span(f"await_approval {event.get('tool')}", parent, start, end, {
            "signoff.run_id": run.run_id, "signoff.approval_id": event.get("approval_id"),
            "signoff.key": event.get("key"), "signoff.rule": event.get("rule"), "signoff.outcome": outcome,
            "signoff.by": event.get("by"), "signoff.approvals": event.get("approvals")})

    def _run_span(self, run: RunRecord, status: str, event: Mapping[str, Any], now: int) -> None:
        usage = event.get("usage") or {}
        attributes = {"signoff.run_id": run.run_id, "signoff.status": status, "signoff.model": run.model,
                      "signoff.requester": run.requester, "signoff.reason": event.get("reason"),
                      **{f"signoff.usage.{name}": value for name, value in usage.items()}}
        token = _CHOSEN_IDS.set(run_ids(run.run_id))
        try:  # a root span: the context says "no parent", and the ids are the run's
            self._span("signoff.run", trace.set_span_in_context(trace.INVALID_SPAN), _ns(run.created_at), now,
                       attributes, error="failed" if status == "failed" else None)
        finally:
            _CHOSEN_IDS.reset(token)

    def _span(self, name: str, parent: Any, start: int, end: int, attributes: Mapping[str, Any], *,
              kind: SpanKind = SpanKind.INTERNAL, error: str | None = None) -> None:
        span = self.tracer.start_span(name, context=parent, kind=kind, start_time=start,
                                      attributes={k: v for k, v in attributes.items() if v is not None})
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=max(end, start))


def _run_span_context(run_id: str) -> SpanContext:
    trace_id, span_id = run_ids(run_id)
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _ns(moment: Any) -> int:
    return int(moment.timestamp() * 1e9)
