"""A run's stored story for `signoff runs show` and `runs export`: every record, secrets redacted, and as text."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from signoff.bot.cli.rendering import as_text, find_call, one_line, step_lines
from signoff.bot.words import plain_budget_line
from signoff.runtime.ports import Store
from signoff.runtime.records import RunRecord
from signoff.runtime.state import REDACTED, redact


def dumps(value: Any, **options: Any) -> str:
    """JSON with datetimes as ISO 8601 text."""
    return json.dumps(value, ensure_ascii=False, default=_json_default, **options)


def run_records(store: Store, run: RunRecord, keys: frozenset[str]) -> dict[str, Any]:
    """Everything stored about a run, secrets redacted, as JSON-ready data."""
    row = dataclasses.asdict(dataclasses.replace(run, checked=None))
    del row["checked"]  # the typed copy of `state`, kept for a worker to resume from
    state = {k: v for k, v in row.pop("state").items() if k != "history"}
    events = store.timeline(run.run_id)
    # Events carry arguments as the runner redacted them with the tool loaded, so the names it
    # hid stay hidden here even when this process cannot load that tool.
    keys = keys | redacted_names(events)
    record = {
        "run": {**row, **{k: state.get(k) for k in ("steps", "usage", "budget", "answer", "stop", "pending",
                                                     "contracts")}},
        "history": run.state.get("history", []),
        "events": events,
        "approvals": [dataclasses.asdict(a) for a in store.list_approvals(run_id=run.run_id, limit=1000)][::-1],
        "executions": store.executions(run.run_id),
    }
    redacted: dict[str, Any] = redact(record, keys)
    return redacted


def redacted_names(value: Any) -> frozenset[str]:
    """Every dict key in `value` whose value is the redaction marker."""
    if isinstance(value, dict):
        found = {k for k, v in value.items() if v == REDACTED and isinstance(k, str)}
        return frozenset(found).union(*(redacted_names(v) for v in value.values()))
    if isinstance(value, list):
        return frozenset().union(*(redacted_names(v) for v in value))
    return frozenset()


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def story_lines(record: Mapping[str, Any]) -> list[str]:
    """`runs show` as text."""
    run = record["run"]
    lines = [f"run {run['run_id']}  {run['status']}",
             f"  goal:       {run['goal']}",
             f"  requester:  {run['requester']}",
             f"  model:      {run['model']}",
             f"  created:    {run['created_at']:%Y-%m-%d %H:%M:%S} UTC   updated: {run['updated_at']:%Y-%m-%d %H:%M:%S} UTC",
             f"  budget:     {plain_budget_line({'budget': run['budget'], 'usage': run['usage'], 'steps': run['steps']})}"]
    if run.get("answer") is not None:
        lines.append(f"  answer:     {run['answer']}")
    if run.get("stop"):
        lines.append(f"  stopped:    {run['stop'].get('reason', '')}")
    lines += ["", "versions (what produced each model turn):"]
    lines += version_lines(record["history"], run.get("contracts") or {}) or ["  (not recorded)"]
    lines += ["", "history (what the model saw and did):"]
    lines += history_lines(record["history"])
    lines += ["", "audit events:"]
    lines += [f"  #{e['seq']:<3} {e['at'][11:19]}  {e['type']:<20} {event_summary(e)}" for e in record["events"]]
    lines += ["", "approvals:"]
    lines += [approval_line(a) for a in record["approvals"]] or ["  (none)"]
    lines += ["", "executions:"]
    lines += [f"  {x['key']}  {x['tool']}  {x['status']}  attempts {x['attempts']}"
              + (f"  {x['seconds']:.3f}s" if x.get("seconds") is not None else "")
              + (f"  error: {one_line(x['error'], 200)}" if x.get("error") else "")
              for x in record["executions"]] or ["  (none)"]
    return lines


def version_lines(history: list[Mapping[str, Any]], contracts: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per stretch of turns made by the same model, prompt and tool contracts, then the
    contracts of each tool catalogue they saw."""
    spans: list[tuple[int, int, tuple[Any, Any, Any]]] = []
    for entry in history:
        if entry.get("role") != "assistant" or not isinstance(entry.get("versions"), Mapping):
            continue
        seen = (entry["versions"].get("model"), entry["versions"].get("prompt"), entry["versions"].get("tools"))
        step = int(entry.get("step") or 0)
        if spans and spans[-1][2] == seen:
            spans[-1] = (spans[-1][0], step, seen)
        else:
            spans.append((step, step, seen))
    lines = [f"  step{'s' if first != last else ''} {first}{f'-{last}' if first != last else ''}:  "
             f"model {model or '?'}  prompt {prompt or '-'}  tools {tools or '?'}"
             for first, last, (model, prompt, tools) in spans]
    for catalogue in dict.fromkeys(tools for _, _, (_, _, tools) in spans if tools):
        listed = ", ".join(f"{name} {digest}" for name, digest in sorted((contracts.get(catalogue) or {}).items()))
        lines.append(f"  tools {catalogue}: {listed or '(contracts not recorded)'}")
    return lines


def history_lines(history: list[Mapping[str, Any]]) -> list[str]:
    lines = []
    for index, entry in enumerate(history):
        match entry.get("role"):
            case "user":
                lines.append(f"  goal: {one_line(entry.get('content', ''), 300)}")
            case "assistant" if "final" in entry:
                lines.append(f"  step {entry.get('step')}  final: {one_line(entry['final'], 500)}")
            case "assistant" if "malformed" in entry:
                lines.append(f"  step {entry.get('step')}  malformed reply: {one_line(entry['malformed'], 200)}")
            case "tool":
                lines += step_lines(find_call(history, entry, before=index), entry, frozenset())
            case "runtime":
                lines.append(f"  step {entry.get('step')}  runtime: {one_line(entry.get('error', ''), 300)}")
    return lines


def event_summary(event: Mapping[str, Any]) -> str:
    skip = {"seq", "type", "at", "run_id", "step", "usage"}
    return one_line(" ".join(f"{k}={as_text(v)}" for k, v in event.items() if k not in skip and v not in (None, "")),
                    160)


def approval_line(approval: Mapping[str, Any]) -> str:
    status = "approved and executed" if approval["status"] == "consumed" else approval["status"]
    decided = f" by {approval['decided_by']}" if approval.get("decided_by") else ""
    note = f": {one_line(approval['note'], 200)}" if approval.get("note") else ""
    contract = f"  contract {approval['contract']}" if approval.get("contract") else ""
    return (f"  {approval['key']}  {approval['tool']}  {status}{decided}{note}{asked_words(approval)}{contract}  "
            f"(requested {approval['requested_at']:%H:%M:%S}, expires {approval['expires_at']:%H:%M:%S} UTC)")


def asked_words(approval: Mapping[str, Any]) -> str:
    """The rule that asked and, for a quorum, who approved: `  rule big-refunds  approvals 1/2: U0LEE`."""
    rule = (approval.get("asked") or {}).get("rule")
    words = f"  rule {rule}" if rule else ""
    if approval.get("quorum", 1) > 1:
        approved = [vote["user"] for vote in approval.get("votes") or () if vote.get("approved")]
        words += f"  approvals {len(approved)}/{approval['quorum']}" + (f": {', '.join(approved)}" if approved else "")
    return words


