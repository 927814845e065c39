"""Fixtures for the CLI tests: `signoff` runs the real CLI in a scratch directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_harness import Signoff

# The repository root on the path makes `tests.fakes` importable (as tests/models/conftest.py does).
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture
def signoff(tmp_path) -> Signoff:
    return Signoff(tmp_path)
