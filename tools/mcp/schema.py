"""An MCP tool's `inputSchema` as a `Tool`'s arguments: what the model sees, checked with `jsonschema`.

What is checked is exactly what is shown (the server's schema), plus one rule of ours: an argument
the schema does not declare is refused unless the schema allows more (`additionalProperties` or
`unevaluatedProperties` other than false), so an approver never approves a call whose extra
arguments the server would read without anyone having been told about them. Messages name the
argument and the rule, never the value (an argument may be a secret).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, cast

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import ValidationError
from jsonschema.validators import validator_for
from referencing import Registry

MAX_REPORTED = 10
"""Problems listed in one message; a model that got ten wrong has enough to go on."""

_PHRASES = {
    "minLength": "must have at least {} characters", "maxLength": "must have at most {} characters",
    "minimum": "must be >= {}", "maximum": "must be <= {}", "exclusiveMinimum": "must be > {}",
    "exclusiveMaximum": "must be < {}", "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items", "pattern": "must match the pattern {}",
    "format": "must be a valid {}", "multipleOf": "must be a multiple of {}", "enum": "must be one of {}",
    "const": "must be {}", "type": "must be of type {}", "minProperties": "must have at least {} properties",
    "maxProperties": "must have at most {} properties",
}


class InvalidSchema(ValueError):
    """The server's `inputSchema` is not a JSON Schema we can check arguments against."""


class JsonSchemaArgs:
    """A JSON Schema and its validator, in the shape `Tool(args_schema=...)` takes."""

    def __init__(self, schema: dict[str, Any]) -> None:
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            raise InvalidSchema('the input schema is not a JSON Schema of "type": "object"')
        checker = validator_for(schema, default=Draft202012Validator)
        try:
            checker.check_schema(schema)
        except SchemaError as exc:
            raise InvalidSchema(f"the input schema is not valid JSON Schema: {exc.message}") from None
        self._schema = copy.deepcopy(schema)
        # An empty registry: a `$ref` resolves inside the schema, never by fetching a URL.
        self._validator = checker(self._schema, registry=Registry(), format_checker=checker.FORMAT_CHECKER)

    @property
    def schema(self) -> dict[str, Any]:
        return copy.deepcopy(self._schema)

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        problems = [f"{name}: Extra inputs are not permitted" for name in self.undeclared(args)]
        errors = sorted(self._validator.iter_errors(args), key=lambda e: [str(p) for p in e.absolute_path])
        for error in errors:
            problems.extend(_describe(error))
        if problems:
            shown = problems[:MAX_REPORTED] + ([f"and {len(problems) - MAX_REPORTED} more"]
                                                if len(problems) > MAX_REPORTED else [])
            raise ValueError("invalid arguments: " + "; ".join(shown))
        return copy.deepcopy(args)

    def undeclared(self, args: dict[str, Any]) -> list[str]:
        """The arguments the schema neither declares nor allows as extras."""
        if _allows_extras(self._schema):
            return []
        declared = _declared(self._schema)
        patterns = list(self._schema.get("patternProperties", {}))
        # `re.search`, as jsonschema itself applies patternProperties.
        return [name for name in args if name not in declared and not any(re.search(p, name) for p in patterns)]


def _allows_extras(schema: dict[str, Any]) -> bool:
    return any(key in schema and schema[key] is not False for key in ("additionalProperties", "unevaluatedProperties"))


def _declared(schema: dict[str, Any]) -> set[str]:
    """Property names at the top of the schema and of its `allOf`/`anyOf`/`oneOf` branches."""
    names = set(schema.get("properties", {}))
    for keyword in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(keyword, []):
            if isinstance(branch, dict):
                names |= set(branch.get("properties", {}))
    return names


def _describe(error: ValidationError) -> list[str]:
    where = ".".join(str(part) for part in error.absolute_path)
    prefix = f"{where}." if where else ""
    if error.validator == "required" and isinstance(error.instance, dict):
        required: list[str] = list(cast(list[str], error.validator_value))
        return [f"{prefix}{name}: field required" for name in required if name not in error.instance]
    phrase = _PHRASES.get(str(error.validator))
    if phrase is not None:
        text = phrase.format(_short(error.validator_value))
    elif error.validator in ("additionalProperties", "unevaluatedProperties"):
        text = "has properties the schema does not declare"
    elif error.validator in ("anyOf", "oneOf"):
        text = "matches none of the allowed forms" if error.validator == "anyOf" else "must match exactly one form"
    else:
        text = f"does not satisfy {error.validator}"
    return [f"{where or '(arguments)'}: {text}"]


def _short(value: Any) -> str:
    """A schema value (never an argument's) as JSON, cut to a readable length."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
