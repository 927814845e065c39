"""What a model call cost, from a price table in USD per million input and output tokens.

The built-in `prices.json` holds sample prices only; operators pass their own file. A model
missing from the table costs 0 and says so in a note, so a stale table never stops a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError

BUILTIN = "prices.json"


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name; a dated name such as `gpt-4o-2024-08-06` finds `gpt-4o`."""

    prices: Mapping[str, Price]
    source: str

    def lookup(self, model: str) -> Price | None:
        """The exact entry, else the longest entry that `model` extends with `-...`."""
        if model in self.prices:
            return self.prices[model]
        stems = [name for name in self.prices if model.startswith(name + "-")]
        return self.prices[max(stems, key=len)] if stems else None

    def cost(self, models: list[str], input_tokens: int, output_tokens: int) -> tuple[float, str | None]:
        """(USD, note): the first of `models` with a price wins; none gives 0 and a note."""
        for model in models:
            price = self.lookup(model)
            if price is not None:
                usd = (input_tokens * price.input + output_tokens * price.output) / 1_000_000
                return round(usd, 8), None
        names = " or ".join(repr(m) for m in dict.fromkeys(models))
        return 0.0, f"no price for model {names} in {self.source}; cost counted as 0"


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Read a price table: the operator's file, or the built-in sample table when `path` is None."""
    if path is None:
        text = resources.files("runtime.models").joinpath(BUILTIN).read_text(encoding="utf-8")
        return parse_prices(text, source=f"the built-in sample {BUILTIN}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read price table {str(path)!r}: {exc.strerror or exc}") from None
    return parse_prices(text, source=str(path))


def parse_prices(text: str, source: str) -> PriceTable:
    """Parse `{"models": {name: {"input": usd, "output": usd}}}`, listing every problem at once."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"price table {source} is not valid JSON: {exc}") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError(f"price table {source} needs a \"models\" object of {{name: {{input, output}}}}")
    prices: dict[str, Price] = {}
    problems: list[str] = []
    for name, entry in models.items():
        values = [entry.get(k) if isinstance(entry, dict) else None for k in ("input", "output")]
        if all(_is_price(v) for v in values):
            prices[name] = Price(float(values[0]), float(values[1]))
        else:
            problems.append(f"price table {source}: {name!r} needs non-negative numbers \"input\" and \"output\"")
    if problems:
        raise ConfigError(problems)
    return PriceTable(prices=prices, source=source)


def _is_price(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
