"""The real Claude Code CLI for the tests here (skipped without node and npm, required when CI is set)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.claude_code.harness import claude_code_cli


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    return claude_code_cli()
