"""Traces of runs, read from the SDK's in-memory exporter: one trace per run across replicas and a
wait for a person, model calls after the GenAI conventions, and nothing at all when not configured."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from bot_fakes import Ledger, Script, final, tool_call
from slack_harness import ManualClock

from signoff.bot.observe.observers import serve_observation
from signoff.runtime.adapters.db import make_engine
from signoff.runtime.adapters.sql import SqlStore
from signoff.runtime.errors import ConfigError, ModelUnavailable
from signoff.runtime.records import Decided
from signoff.runtime.runner import Runner
from signoff.runtime.runner_config import RunnerConfig

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from signoff.bot.observe.traces import Traces, run_ids, tracer_provider, traces_from_env  # noqa: E402

MODEL = "openai:gpt-4o-mini"


def usage(tokens_in: int, tokens_out: int, cost: float) -> dict[str, object]:
    return {"usage": {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": cost}}


class Replica:
    """A runner on the shared database with its own traces, as a second process would have."""

    def __init__(self, sqlite_url: str, clock: ManualClock, ledger: Ledger, policy) -> None:
        self.exporter = InMemorySpanExporter()
        self.store = SqlStore(make_engine(sqlite_url), clock=clock.now)
        traces = Traces(tracer_provider([SimpleSpanProcessor(self.exporter)]),
                        clock=lambda: int(clock.now().timestamp() * 1e9))
        self.runner = Runner(self.store, ledger.tools(), lambda spec: policy, RunnerConfig(model=MODEL),
                             observer=traces)

    def spans(self) -> dict[str, ReadableSpan]:
        return {span.name: span for span in self.exporter.get_finished_spans()}

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_a_run_is_one_trace_across_replicas_and_a_wait_for_a_person(sqlite_url, clock):
    ledger = Ledger()
    script = Script({**tool_call("lookup_order", order_id="42"), **usage(900, 40, 0.0011)},
                    {**tool_call("issue_refund", order_id="42", amount_usd=19.99), **usage(1000, 30, 0.0012)},
                    {**final("Refunded order 42."), **usage(1100, 10, 0.0013)})
    first, second = Replica(sqlite_url, clock, ledger, script), Replica(sqlite_url, clock, ledger, script)
    try:
        run = first.runner.start_run("Refund order 42", "U0ASKER", origin={"channel": "C0RUNS"})
        assert first.runner.execute(run.run_id) == "awaiting_approval"
        approval = first.runner.pending_approval(run.run_id)
        clock.advance(minutes=5)  # nobody looks for five minutes
        assert isinstance(second.runner.decide(approval.approval_id, approval.digest, "U0LEAD", True), Decided)
        assert second.runner.execute(run.run_id) == "done"
        spans_here, spans_there = first.spans(), second.spans()
    finally:
        first.close()
        second.close()

    assert set(spans_here) == {"chat gpt-4o-mini", "execute_tool lookup_order"}  # each name once: the last
    assert set(spans_there) == {"await_approval issue_refund", "execute_tool issue_refund", "chat gpt-4o-mini",
                                "signoff.run"}
    spans = [*first.exporter.get_finished_spans(), *second.exporter.get_finished_spans()]
    assert len(spans) == 7  # three model calls, two tool calls, one wait, one run
    trace_id, run_span_id = run_ids(run.run_id)
    root = spans_there["signoff.run"]
    assert (root.context.trace_id, root.context.span_id, root.parent) == (trace_id, run_span_id, None)
    assert all(s.context.trace_id == trace_id for s in spans)
    assert all(s.parent is not None and s.parent.span_id == run_span_id for s in spans if s is not root)
    assert root.start_time == int(run.created_at.timestamp() * 1e9)
    assert root.end_time >= max(s.end_time for s in spans)
    assert root.attributes["signoff.status"] == "done" and root.attributes["signoff.usage.model_calls"] == 3

    models = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert [s.attributes["signoff.step"] for s in models] == [1, 2, 3]
    assert [s.attributes["gen_ai.usage.input_tokens"] for s in models] == [900, 1000, 1100]
    assert [s.attributes["gen_ai.usage.output_tokens"] for s in models] == [40, 30, 10]
    assert all(s.kind is SpanKind.CLIENT and s.attributes["gen_ai.operation.name"] == "chat"
               and s.attributes["gen_ai.provider.name"] == "openai"
               and s.attributes["gen_ai.request.model"] == "gpt-4o-mini" for s in models)

    wait = spans_there["await_approval issue_refund"]
    assert wait.end_time - wait.start_time == 300 * 10**9
    assert dict(wait.attributes).items() >= {"signoff.approval_id": approval.approval_id, "signoff.outcome": "approved",
                                             "signoff.by": "U0LEAD", "signoff.key": f"{run.run_id}:2"}.items()
    refund = spans_there["execute_tool issue_refund"]
    assert dict(refund.attributes).items() >= {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "issue_refund", "signoff.outcome": "ok",
                                               "signoff.side_effect": True}.items()
    assert ledger.total == 1


def test_a_model_that_fails_is_an_error_span_and_the_stop_a_mark(sqlite_url, clock):
    def unavailable(history):
        raise ModelUnavailable("503 from the provider")

    replica = Replica(sqlite_url, clock, Ledger(), unavailable)
    try:
        run = replica.runner.start_run("Say hello", "U0ASKER")
        assert replica.runner.execute(run.run_id) == "failed"
        spans = replica.spans()
    finally:
        replica.close()
    assert set(spans) == {"chat gpt-4o-mini", "stopped failed"}  # no run span: a failed run can be retried
    model = spans["chat gpt-4o-mini"]
    assert model.status.status_code is StatusCode.ERROR
    assert model.attributes["error.type"] == "model unavailable"
    assert spans["stopped failed"].attributes["signoff.reason"] == "model unavailable"


def test_the_standard_variables_choose_the_exporter():
    assert traces_from_env({}) is None
    assert traces_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert traces_from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}) is None
    for environ in ({"OTEL_TRACES_EXPORTER": "console"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}):
        traces = traces_from_env(environ)
        assert isinstance(traces, Traces)
        traces.shutdown()
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER: .*not zipkin"):
        traces_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL: .*http/protobuf, not grpc"):
        traces_from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_without_otel_variables_opentelemetry_is_not_even_imported():
    probe = ("import sys; from signoff.bot.observe.observers import serve_observation; "
             "observation = serve_observation({}); "
             "print(observation.traces, 'signoff.bot.observe.traces' in sys.modules, 'opentelemetry.sdk' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["None", "False", "False"]


def test_otel_variables_without_the_extra_serve_without_traces_and_say_so(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "signoff.bot.observe.traces", None)  # as if opentelemetry were not installed
    with caplog.at_level(logging.WARNING):
        observation = serve_observation({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert observation.traces is None
    assert any('pip install -e ".[otel]"' in r.getMessage() for r in caplog.records)
