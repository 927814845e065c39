"""The engine is pure: importing it loads no Slack, SQL, HTTP or model-provider library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = ["signoff", "signoff.runtime", "signoff.runtime.agent", "signoff.runtime.state", "signoff.runtime.budget",
        "signoff.runtime.decisions", "signoff.runtime.tool_calls", "signoff.runtime.records", "signoff.runtime.errors",
        "signoff.runtime.failpoints", "signoff.runtime.ports", "signoff.runtime.rules", "signoff.runtime.approval", "signoff.runtime.effects",
        "signoff.runtime.loop", "signoff.runtime.judging", "signoff.runtime.call_outcomes", "signoff.runtime.batches",
        "signoff.runtime.replies", "signoff.runtime.requests", "signoff.runtime.edits", "signoff.runtime.commands", "signoff.runtime.schema",
        "signoff.runtime.values", "signoff.runtime.history", "signoff.runtime.pending_calls",
        "signoff.runtime.approval_commands", "signoff.runtime.approval_unit", "signoff.runtime.starting_calls",
        "signoff.tools.base"]
STORE_FREE = ["signoff.runtime.runner", "signoff.runtime.deciders", "signoff.runtime.run_requests",
              "signoff.runtime.runner_config", "signoff.runtime.worker", "signoff.runtime.telling",
              "signoff.runtime.adapters.memory"]
"""The runner and what it tells people depend on the store's Protocols only, and the in-memory store
needs no database library: none of them may pull one in."""
ADAPTER_LIBRARIES = {"slack_sdk", "slack_bolt", "sqlalchemy", "alembic", "psycopg", "httpx", "requests", "urllib3",
                     "openai", "anthropic", "apscheduler", "gunicorn"}


def adapter_libraries_loaded_by(modules: list[str]) -> str:
    """The adapter libraries a fresh interpreter has loaded after importing `modules`."""
    probe = (f"import sys\nfor name in {modules!r}: __import__(name)\n"
             f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {ADAPTER_LIBRARIES!r})))")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_the_core_imports_no_adapter_library():
    loaded = adapter_libraries_loaded_by(CORE)
    assert loaded == "", f"the pure core pulled in {loaded}"


def test_the_runner_and_the_memory_store_import_no_adapter_library():
    loaded = adapter_libraries_loaded_by(STORE_FREE)
    assert loaded == "", f"the runner, telling or the memory store pulled in {loaded}"


LAYERS = {"tools": set(), "runtime": {"tools"}, "bot": {"runtime", "tools"}}
"""Each top-level package, and the ones it may import: imports flow bot -> runtime -> tools, never back."""


def imported_packages(path: Path) -> set[str]:
    """The packages of ours (`signoff.<package>`) a module imports, at any depth of its body, `TYPE_CHECKING`
    blocks included. A bare `runtime`, `tools` or `bot` counts too: it would be someone else's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {package_of(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(package_of(node.module))
    return names


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if parts[0] == "signoff" and len(parts) > 1 else parts[0]


def test_imports_flow_from_the_slack_edge_to_the_engine_to_the_tool_contract_never_back():
    root = Path(__file__).resolve().parents[2]
    wrong = []
    for package, allowed in LAYERS.items():
        forbidden = set(LAYERS) - allowed - {package}
        for path in sorted((root / package).rglob("*.py")):
            for name in imported_packages(path) & forbidden:
                wrong.append(f"{path.relative_to(root)} imports {name}")
    assert wrong == []


APPROVAL_RULES = {"signoff.runtime.grants", "signoff.runtime.people", "signoff.runtime.approval_policy",
                  "signoff.runtime.judging", "signoff.runtime.requests", "signoff.runtime.edits"}
"""Where the rules an approval is decided by live besides `runtime/approval.py`: whom a grant covers,
who may approve, the policy, the loop's judgement of a call, people's requests and edits."""


def test_the_stores_decide_no_approval_rule_they_apply_the_aggregates_transitions():
    root = Path(__file__).resolve().parents[2]
    wrong = []
    for path in sorted((root / "runtime" / "adapters").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in APPROVAL_RULES:
                wrong.append(f"{path.relative_to(root)} imports {node.module}")
    assert wrong == []


COMMANDED_TRANSITIONS = {"signoff.runtime.approval": {"vote", "nudge", "expire", "overdue", "dispatch", "use_grant",
                                                      "cancel_pending", "supersede_by_edit", "close", "reopen",
                                                      "opened"},
                         "signoff.runtime.break_glass": {"review", "follow_up"},
                         "signoff.runtime.receipts": {"decision_receipt", "start_receipt"},
                         "signoff.runtime.rules": {"is_retry_request", "execution_started", "command_refusal"}}
"""The transitions a command of `approval_commands` or `starting_calls` asks for (a step's approvals
included), and the receipts it signs: a store opens the unit of work they run in (`approval_unit`)
and calls none of them, so no store can count a vote, sweep, open, close, use an approval or a grant
up, or sign differently from another."""


def test_the_stores_open_units_of_work_and_leave_the_approval_commands_to_the_core():
    root = Path(__file__).resolve().parents[2]
    wrong = []
    for path in sorted((root / "runtime" / "adapters").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in COMMANDED_TRANSITIONS:
                for alias in node.names:
                    if alias.name in COMMANDED_TRANSITIONS[node.module]:
                        wrong.append(f"{path.relative_to(root)} imports {node.module}.{alias.name}")
    assert wrong == []
