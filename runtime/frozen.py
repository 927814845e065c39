"""Read-only JSON: dicts and lists that refuse to change, for handing the run state out. Pure.

They are real `dict` and `list` subclasses, so `json.dumps`, `==`, `dict(...)` and every reader
of plain JSON work unchanged; only writing raises. A copy (`copy.copy`, `copy.deepcopy`, pickling)
is a plain, writable dict or list.
"""

from __future__ import annotations

from typing import Any, NoReturn


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"the run state is read-only ({type(self).__name__}); "
                    "it changes only through the agent's transitions")


class FrozenDict(dict[str, Any]):
    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (thawed(self),)


class FrozenList(list[Any]):
    __slots__ = ()
    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thawed(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (thawed(self),)


def frozen(value: Any) -> Any:
    """A read-only deep copy of JSON-shaped data (tuples become read-only lists)."""
    kind = type(value)
    if kind in SCALARS or kind is FrozenDict or kind is FrozenList:
        return value  # the common case first: a long history is mostly strings and numbers
    if isinstance(value, dict):
        # Scalars are kept inline rather than by a call each: most of an entry is scalars.
        return FrozenDict({k: v if type(v) in SCALARS else frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return FrozenList([v if type(v) in SCALARS else frozen(v) for v in value])
    return value


SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def thawed(value: Any) -> Any:
    """A plain, writable deep copy of JSON-shaped data (dicts, lists, scalars), several times faster
    than `copy.deepcopy`, which a long run's history makes worth having. Other values are shared."""
    if isinstance(value, dict):
        return {k: v if type(v) in SCALARS else thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in SCALARS else thawed(v) for v in value]
    if isinstance(value, tuple):
        return tuple(thawed(v) for v in value)
    return value
