"""Model policies: OpenAI-compatible and Anthropic adapters, a scripted policy, prices and retries."""

from runtime.models.factory import check_model, describe_model, parse_spec, policy_from_spec
from runtime.models.pricing import Price, PriceTable, load_prices
from runtime.models.retry import RetryAttempt, RetryPolicy
from runtime.models.scripted import ScriptedPolicy
from runtime.models.shaping import MAX_OUTPUT_CHARS, shape_json

__all__ = [
    "MAX_OUTPUT_CHARS", "Price", "PriceTable", "RetryAttempt", "RetryPolicy", "ScriptedPolicy",
    "check_model", "describe_model", "load_prices", "parse_spec", "policy_from_spec", "shape_json",
]
