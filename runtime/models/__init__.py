"""Model policies: OpenAI-compatible and Anthropic adapters, a scripted policy, prices and retries."""

from signoff.runtime.models.factory import check_model, describe_model, parse_spec, policy_from_spec
from signoff.runtime.models.pricing import Price, PriceTable, load_prices
from signoff.runtime.models.retry import RetryAttempt, RetryPolicy
from signoff.runtime.models.scripted import ScriptedPolicy
from signoff.runtime.models.shaping import MAX_OUTPUT_CHARS, shape_json

__all__ = [
    "MAX_OUTPUT_CHARS", "Price", "PriceTable", "RetryAttempt", "RetryPolicy", "ScriptedPolicy",
    "check_model", "describe_model", "load_prices", "parse_spec", "policy_from_spec", "shape_json",
]
