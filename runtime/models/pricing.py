"""What a model call cost, from a price table in USD per million input and output tokens.

The built-in `prices.json` holds sample prices only; operators pass their own file. A model
missing from the table costs 0 and says so in a note, so a stale table never stops a run.

An entry may also price prompt-cache writes and reads (`cache_write`, `cache_read`). One left
out prices those tokens at `input`: providers' cache multipliers differ, so none is guessed.
The sample OpenAI entries give no `cache_write` on purpose: OpenAI charges nothing extra to write
its cache, and that is right here only because OpenAI never reports cache writes (its usage counts
cached reads alone), so its uncached prompt tokens are all priced at `input`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from signoff.runtime.errors import ConfigError

BUILTIN = "prices.json"
CACHE_KEYS = ("cache_write", "cache_read")


@dataclass(frozen=True)
class Price:
    """USD per million tokens; a cache price of None means the `input` price."""

    input: float
    output: float
    cache_write: float | None = None
    cache_read: float | None = None

    def usd(self, input_tokens: int, output_tokens: int, cache_write_tokens: int, cache_read_tokens: int) -> float:
        """The cost of a call whose `input_tokens` include its cache writes and reads."""
        # A provider reporting more cached tokens than input must not make the uncached part negative.
        uncached = max(0, input_tokens - cache_write_tokens - cache_read_tokens)
        cache_write = self.input if self.cache_write is None else self.cache_write
        cache_read = self.input if self.cache_read is None else self.cache_read
        per_million = (uncached * self.input + cache_write_tokens * cache_write
                       + cache_read_tokens * cache_read + output_tokens * self.output)
        return per_million / 1_000_000


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

    def cost(self, models: list[str], input_tokens: int, output_tokens: int, *,
             cache_write_tokens: int = 0, cache_read_tokens: int = 0) -> tuple[float, str | None]:
        """(USD, note): the first of `models` with a price wins; none gives 0 and a note.

        `input_tokens` is the whole input, cache writes and reads included.
        """
        for model in models:
            price = self.lookup(model)
            if price is not None:
                return round(price.usd(input_tokens, output_tokens, cache_write_tokens, cache_read_tokens), 8), None
        names = " or ".join(repr(m) for m in dict.fromkeys(models))
        return 0.0, f"no price for model {names} in {self.source}; cost counted as 0"


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Read a price table: the operator's file, or the built-in sample table when `path` is None."""
    if path is None:
        text = resources.files("signoff.runtime.models").joinpath(BUILTIN).read_text(encoding="utf-8")
        return parse_prices(text, source=f"the built-in sample {BUILTIN}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read price table {str(path)!r}: {exc.strerror or exc}") from None
    return parse_prices(text, source=str(path))


def parse_prices(text: str, source: str) -> PriceTable:
    """Parse `{"models": {name: {"input": usd, "output": usd}}}`, listing every problem at once.

    An entry may add `"cache_write"` and `"cache_read"` prices; when given they must be valid too.
    """
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
        fields = entry if isinstance(entry, dict) else {}
        entry_problems = _entry_problems(name, fields, source)
        if entry_problems:
            problems.extend(entry_problems)
        else:
            prices[name] = _price(fields)
    if problems:
        raise ConfigError(problems)
    return PriceTable(prices=prices, source=source)


def _entry_problems(name: str, fields: dict[str, Any], source: str) -> list[str]:
    problems = []
    if not all(_is_price(fields.get(k)) for k in ("input", "output")):
        problems.append(f"price table {source}: {name!r} needs non-negative numbers \"input\" and \"output\"")
    for key in CACHE_KEYS:
        if key in fields and not _is_price(fields[key]):
            problems.append(f"price table {source}: {name!r} has \"{key}\" {fields[key]!r}; "
                            f"when given it must be a non-negative number")
    return problems


def _price(fields: dict[str, Any]) -> Price:
    cache = {key: float(fields[key]) for key in CACHE_KEYS if key in fields}
    return Price(float(fields["input"]), float(fields["output"]), **cache)


def _is_price(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
