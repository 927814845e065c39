"""The values the run state is made of: frozen, strict pydantic models, and the fast paths the
loop's transitions make them by.

Pure: pydantic only. Every model refuses keys it does not know (`extra="forbid"`) and values of
the wrong type (`strict`: no `"3"` for 3, no `true` for 1). Optional fields that a writer leaves
out stay out of the JSON (dump with `exclude_unset`), so an entry reads back exactly as written.
"""

from __future__ import annotations

from typing import Annotated, Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Count = Annotated[int, Field(ge=0)]


class Value(BaseModel):
    """A frozen, strict value of the run state."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON-shaped dict of this value, without the optional fields it was made without
        (what `model_dump(exclude_unset=True)` gives, read straight from the fields: a step makes
        several of these, and pydantic's serialiser costs more than the walk for values this small)."""
        fields_set = self.__pydantic_fields_set__
        return {name: _json_of(value) for name, value in self.__dict__.items() if name in fields_set}

    @classmethod
    def trusted(cls, **fields: Any) -> Self:
        """A value made of `fields` without validating them: only for the loop's transitions, which
        build values out of parts already validated where they came in (a policy's reply, a tool's
        result, a stored state) or made by the loop itself. Validating them again would give an
        equal value (tests/runtime/test_trusted_values.py shows it does), at several times the cost.

        Unknown or missing fields are refused (`TypeError`); their types are the caller's to keep.
        """
        template, required = _templates.get(cls) or _template(cls)
        values = {**template, **fields}  # the fields in declaration order, as validation orders them
        if len(values) != len(template) or not required <= fields.keys():
            raise TypeError(f"{cls.__name__}.trusted: unknown fields {sorted(set(fields) - set(template))} "
                            f"or missing {sorted(required - fields.keys())}")
        return _made(cls, values, set(fields))

    def evolved(self, **changes: Any) -> Self:
        """A copy with `changes`, which must already be valid values of their fields (the loop's
        transitions, whose inputs were validated where they came in). `model_copy` without its
        generality: a step makes a handful of these, so it is worth the few lines."""
        fields_set = self.__pydantic_fields_set__
        if not changes.keys() <= fields_set:  # shared otherwise: nothing changes a value's set
            fields_set = fields_set | changes.keys()
        return _made(type(self), {**self.__dict__, **changes}, fields_set)


_templates: dict[type[Value], tuple[dict[str, Any], frozenset[str]]] = {}
"""By class: every field with its default (None where it has none), and the fields without one."""

# The slots of a pydantic model, set directly: `object.__setattr__` looks each one up through the
# class's whole MRO.
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_new = object.__new__


def _template(cls: type[Value]) -> tuple[dict[str, Any], frozenset[str]]:
    fields = cls.model_fields
    made = _templates[cls] = ({name: None if info.is_required() else info.get_default(call_default_factory=True)
                               for name, info in fields.items()},
                              frozenset(name for name, info in fields.items() if info.is_required()))
    return made


V = TypeVar("V", bound=Value)


def _made(cls: type[V], values: dict[str, Any], fields_set: set[str]) -> V:
    made = _new(cls)
    _set_dict(made, values)
    _set_fields_set(made, fields_set)
    _set_extra(made, None)
    _set_private(made, None)
    return made


def _json_of(value: Any) -> Any:
    """A field's value as `model_dump(mode="python", exclude_unset=True)` gives it: values as their
    JSON, containers copied, except that a tuple (the history) becomes a list, a JSON array."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, Value):
        return value.to_json()
    if kind is dict:
        return {k: _json_of(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_json_of(v) for v in value]
    return value


def valid(kind: type[V], trusted: bool, **fields: Any) -> V:
    """A `kind` of `fields`: made as it is when `trusted` (every field already a valid value of
    its type, see `Value.trusted`), validated otherwise."""
    return kind.trusted(**fields) if trusted else kind(**fields)
