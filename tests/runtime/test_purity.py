"""The engine is pure: importing it loads no Slack, SQL, HTTP or model-provider library."""

from __future__ import annotations

import subprocess
import sys

CORE = ["runtime", "runtime.agent", "runtime.state", "runtime.budget", "runtime.decisions", "runtime.tool_calls",
        "runtime.records", "runtime.errors", "runtime.failpoints", "runtime.ports", "tools.base"]
ADAPTER_LIBRARIES = {"slack_sdk", "slack_bolt", "sqlalchemy", "alembic", "psycopg", "httpx", "requests", "urllib3",
                     "openai", "anthropic", "apscheduler", "gunicorn"}


def test_the_core_imports_no_adapter_library():
    probe = (f"import sys\nfor name in {CORE!r}: __import__(name)\n"
             f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {ADAPTER_LIBRARIES!r})))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"the pure core pulled in {loaded}"
