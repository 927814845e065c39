"""From a model spec (`openai:<model>`, `anthropic:<model>`, `scripted:<path>`) to a policy.

Nothing here reads `os.environ`: keys and base URLs come from the `env` mapping the caller passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from signoff.runtime.agent import Policy
from signoff.runtime.errors import ConfigError
from signoff.runtime.models import anthropic as anthropic_adapter
from signoff.runtime.models import openai as openai_adapter
from signoff.runtime.models.anthropic import AnthropicPolicy
from signoff.runtime.models.openai import OpenAIPolicy
from signoff.runtime.models.pricing import load_prices
from signoff.runtime.models.retry import RetryPolicy
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.tools.base import Tool

PROVIDERS = ("openai", "anthropic", "scripted")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 3


def parse_spec(spec: str) -> tuple[str, str]:
    """`"openai:gpt-4o"` -> `("openai", "gpt-4o")`; raise `ConfigError` for anything else."""
    expected = "expected openai:<model>, anthropic:<model> or scripted:<path to a JSON file>"
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"model spec {spec!r} is not valid: {expected}")
    provider, _, name = spec.partition(":")
    provider, name = provider.strip().lower(), name.strip()
    if provider not in PROVIDERS:
        raise ConfigError(f"model spec {spec!r} names unknown provider {provider!r}: {expected}")
    if not name:
        raise ConfigError(f"model spec {spec!r} has no {'path' if provider == 'scripted' else 'model name'}: "
                          f"{expected}")
    return provider, name


def policy_from_spec(
    spec: str,
    tools: Iterable[Tool] | Mapping[str, Tool],
    *,
    instructions: str = "",
    prices_path: str | Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_retries: int = DEFAULT_MAX_RETRIES,
    env: Mapping[str, str],
    sleep: Callable[[float], None] = time.sleep,
) -> Policy:
    """Build the policy a spec names.

    Args:
        tools: the tools the model may call (a list, or the registry's name -> tool mapping).
        instructions: the operator's instructions, placed before the tool catalogue in the system prompt.
        prices_path: a price table to use instead of the built-in sample prices.
        env: where API keys and base URLs are read (`OPENAI_*`, `ANTHROPIC_*`).
        sleep: how retries wait; tests pass a recorder.
    """
    provider, name = parse_spec(spec)
    if provider == "scripted":
        return ScriptedPolicy.from_file(name)
    tool_list = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
    options: dict[str, Any] = {"instructions": instructions, "prices": load_prices(prices_path),
                               "retry": RetryPolicy(max_retries=max_retries, sleep=sleep)}
    if provider == "openai":
        return OpenAIPolicy(name, tool_list, openai_adapter.make_client(env, timeout_s), **options)
    return AnthropicPolicy(name, tool_list, anthropic_adapter.make_client(env, timeout_s), **options)


def describe_model(spec: str) -> str:
    """A one-line, human description of a spec, for `signoff check` and run headers."""
    provider, name = parse_spec(spec)
    match provider:
        case "openai":
            return f"OpenAI-compatible Chat Completions, model {name!r}"
        case "anthropic":
            return f"Anthropic Messages API, model {name!r}"
        case _:
            return f"scripted decisions from {Path(name).name!r} (scripted, not a model)"


def check_model(
    spec: str,
    env: Mapping[str, str],
    *,
    timeout_s: float = 20.0,
    max_retries: int = 1,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """One cheap authenticated call; returns `"ok ..."` or raises `ModelAuthError` / `ModelUnavailable`."""
    provider, name = parse_spec(spec)
    retry = RetryPolicy(max_retries=max_retries, sleep=sleep)
    match provider:
        case "openai":
            return openai_adapter.check(name, env, timeout_s, retry)
        case "anthropic":
            return anthropic_adapter.check(name, env, timeout_s, retry)
        case _:
            policy = ScriptedPolicy.from_file(name)
            return f"ok: {policy.name} has {len(policy.decisions)} decision(s) (scripted, not a model)"
