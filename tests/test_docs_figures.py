"""Figures in the guides are generated, not typed: measurements (times, ratios, percentiles) come
from the tables `bench/run` writes into BENCHMARKS.md, which the site takes from it as it is built
(docs/hooks/generated_figures.py); a guide that wants one links there instead of copying it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

from tests.test_docs import prose

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MEASUREMENT = re.compile(r"\d\s?(?:ms|µs)\b|\bp(?:50|95|99)\b|\d(?:\.\d+)?x (?:faster|slower|the time)", re.I)


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generated_figures", ROOT / "docs" / "hooks" / "generated_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built(markdown: str) -> str:
    page = SimpleNamespace(file=SimpleNamespace(src_path="benchmarks.md"))
    config = SimpleNamespace(config_file_path=str(ROOT / "mkdocs.yml"))
    return str(hook().on_page_markdown(markdown, page, config, None))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_guide_types_a_measurement_in_its_prose(page):
    typed = MEASUREMENT.findall(prose(page.read_text(encoding="utf-8")))

    assert typed == [], f"{page.name}: link to the generated figures (docs/benchmarks.md) instead"


def test_the_benchmarks_page_shows_the_tables_bench_run_wrote():
    source = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    written = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")

    shown = built(source)

    names = re.findall(r"^<!-- generated: BENCHMARKS\.md (bench:[\w-]+) -->$", source, re.M)
    assert "bench:targets" in names and "<!-- generated:" not in shown
    for name in names:
        block = written.split(f"<!-- {name} -->\n", 1)[1].split(f"<!-- /{name} -->", 1)[0].rstrip("\n")
        assert block and block in shown


def test_a_block_bench_run_never_wrote_fails_the_build():
    with pytest.raises(PluginError, match="no block bench:nothing in BENCHMARKS.md"):
        built("<!-- generated: BENCHMARKS.md bench:nothing -->\n")
