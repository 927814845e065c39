"""An approval policy file read: YAML, checked against `policy_schema`, made an `ApprovalPolicy`. Pure.

Every problem is one `PolicyError` naming the file, the rule and the field, in Signoff's words:
pydantic's errors are worded here, by where in the file they are, and its own wording is never shown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from signoff.runtime.approval_policy import DECISIONS, ApprovalPolicy, PolicyError, Requirement, Rule
from signoff.runtime.policy_cel import one_line
from signoff.runtime.policy_schema import (
    AllowRuleFile,
    AskRuleFile,
    BreakGlassFile,
    DefaultsFile,
    DenyRuleFile,
    EscalateFile,
    GrantFile,
    PolicyFile,
)
from signoff.tools.strict_yaml import load_yaml


def parse_policy(text: str, *, source: str, approvers: Iterable[str] = (), ttl: timedelta = timedelta(minutes=30),
                 allow_self_approval: bool = False) -> ApprovalPolicy:
    """The policy written in `text` (YAML), or a `PolicyError` naming `source`, the rule and the problem.

    `approvers`, `ttl` and `allow_self_approval` stand in for defaults the file leaves out.
    """
    document = _load_yaml(text, source)
    try:
        policy_file = PolicyFile.model_validate(document)
    except ValidationError as exc:
        raise PolicyError(f"{source}: {_first_problem(exc.errors(), document)}") from None
    try:
        defaults = policy_file.defaults.requirement(Requirement(tuple(approvers), 1, ttl, allow_self_approval))
    except PolicyError as exc:
        raise PolicyError(f"{source}: defaults: {exc}") from None
    rules: list[Rule] = []
    for position, rule_file in enumerate(policy_file.rules, start=1):
        try:
            rule = rule_file.rule(defaults)
            earlier = next((n for n, r in enumerate(rules, start=1) if r.name == rule.name), None)
            if earlier is not None:
                raise PolicyError(f"the name is used twice (rules {earlier} and {position})")
        except PolicyError as exc:
            raise PolicyError(f"{source}: {_rule_label(rule_file.name, position)}: {exc}") from None
        rules.append(rule)
    return ApprovalPolicy.build(defaults, tuple(rules), source)


def _load_yaml(text: str, source: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise PolicyError(f"{source}: not valid YAML{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {one_line(str(exc))}") from None


def _rule_label(name: object, position: int) -> str:
    return f"rule {name!r}" if isinstance(name, str) and name.strip() else f"rule {position}"


# -- pydantic's errors in the policy's words ----------------------------------------------------


def _aliases(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(info.alias or name for name, info in model.model_fields.items())


_ASK_FIELDS = tuple(name for name in _aliases(AskRuleFile) if name not in _aliases(AllowRuleFile))
_ALLOWED = {"file": _aliases(PolicyFile), "defaults": _aliases(DefaultsFile), "grant": _aliases(GrantFile),
            "escalate": _aliases(EscalateFile), "break_glass": _aliases(BreakGlassFile),
            "rule": tuple(dict.fromkeys([*_aliases(AskRuleFile), *_aliases(DenyRuleFile)]))}
"""The fields each mapping of the file may hold, in the order they are listed when one is not known."""
_UNEXPECTED = ("extra_forbidden", "invalid_key")
_TEXT = "{field} must be non-empty text, got {value}"
_FLAG = "{field} must be true or false, got {value}"
_DURATION_WORDS = "ttl must be a duration like 90s, 15m, 2h, 1h30m or 1d, or a number of seconds, got {value}"
_SLACK_IDS = "approvers must be a list of Slack ids, got {value}"
_TAKES = {
    "name": _TEXT, "tool": _TEXT, "when": _TEXT, "reason": _TEXT,
    "decision": f"decision must be one of {', '.join(DECISIONS)}, got {{value}}",
    "approvers": _SLACK_IDS, "to": _SLACK_IDS,
    "quorum": "quorum must be a whole number of people, 1 or more, got {value}",
    "ttl": _DURATION_WORDS, "for": _DURATION_WORDS, "after": _DURATION_WORDS,
    "step_up": "step_up must be how recent the approver's sign-in at the web console must be, a duration like "
               "10m, 1h or 1d, got {value}",
    "allow_self_approval": _FLAG, "confirm": _FLAG,
    "on_expiry": "on_expiry must be end (the run ends as expired) or continue (the model is told nobody decided "
                 "in time, and the run goes on), got {value}",
    "remind": "remind must be a list of percentages of the ttl, like [50%, 90%], got {kind}",
    "same": "same must be a list of argument names",
    "scope": "scope must be run or requester, got {value}",
    "grant": "grant: expected a mapping with for, same and scope, got {kind}",
    "escalate": "escalate: expected a mapping with after and to, got {kind}",
    "break_glass": "break_glass: expected a mapping with reason_min_chars, review_within and notify, got {kind}",
    "reason_min_chars": "reason_min_chars must be a whole number of characters from 1 to 500, got {value}",
    "review_within": "review_within must be a duration like 4h or 1d, got {value}",
    "notify": "notify must be a list of Slack channel ids, got {value}",
    "defaults": "defaults: expected a mapping, got {kind}",
    "rules": "rules must be a list, got {kind}",
}
"""What each field is told of a value it does not take: `{value}` is the value, `{kind}` its kind in YAML."""
_ITEM_TAKES = {"remind": "remind: {value} is not a percentage of the ttl between 0% and 100%, like 50%"}
"""What an item of a list is told where it is named on its own; any other item is told its list's words."""
_EMPTY = {"approvers": "approvers is empty, so no one could approve; list at least one, or leave the field out "
                       "to use the default approvers",
          "to": "to is empty: name who is added",
          "notify": "notify is empty: name the channel told when someone breaks the glass, e.g. [C0SECURITY]"}
_MISSING_HINT = {"for": " (how long later calls may run unasked, e.g. 30m)"}
_NOT_A_RULE = "expected a mapping with name, tool and decision, got {kind}"
_NOT_A_FILE = "expected a mapping with 'defaults' and 'rules' at the top, the file is {found}"
_UNKNOWN, _MISSING, _VALUE, _MISPLACED = range(4)
"""The order problems are told in, within one mapping. A field the decision does not use comes last: a
decision that does not exist is read as ask, and then the wrong decision is the problem worth saying."""


@dataclass(frozen=True)
class _Place:
    """Where an error is: the names its message starts with, the mapping holding the field, the field."""

    names: tuple[str, ...]
    holder: str
    """`file`, `defaults`, `rule`, `grant`, `escalate` or `break_glass`."""
    field: str | int | None
    """None: the mapping itself is wrong."""
    item: bool
    """The error is in an item of the field's list."""
    decision: str
    """The decision the rule was read with."""


def _place(loc: tuple[str | int, ...], document: Any) -> _Place:
    names: list[str] = []
    holder, decision, steps = "file", "ask", loc
    if len(steps) > 1 and steps[0] == "defaults":
        names, holder, steps = ["defaults"], "defaults", steps[1:]
    elif len(steps) > 2 and steps[0] == "rules":
        position = int(steps[1])
        raw = document["rules"][position]
        names = [_rule_label(raw.get("name") if isinstance(raw, dict) else None, position + 1)]
        holder, decision, steps = "rule", str(steps[2]), steps[3:]  # steps[2] is the union's tag
    if len(steps) > 1 and steps[0] in ("grant", "escalate", "break_glass"):
        names.append(str(steps[0]))
        holder, steps = str(steps[0]), steps[1:]
    return _Place(tuple(names), holder, steps[0] if steps else None, len(steps) > 1, decision)


def _first_problem(errors: list[ErrorDetails], document: Any) -> str:
    """The message for the problem read first: mapping by mapping, top to bottom, each mapping's unknown
    fields first, then its missing ones, then its values in the order of its fields (a mapping inside a
    field counting as that field's value), then the fields its rule's decision does not use."""
    places = [_place(error["loc"], document) for error in errors]
    seen: dict[tuple[str | int, ...], int] = {}
    for error in errors:
        for end in range(len(error["loc"]) + 1):
            seen.setdefault(error["loc"][:end], len(seen))

    def reading_order(index: int) -> list[tuple[int, int]]:
        loc = errors[index]["loc"]
        within = [(_VALUE, seen[loc[:end]]) for end in range(1, len(loc))]
        return [*within, (_rank(errors[index], places[index]), seen[loc])]

    first = min(range(len(errors)), key=reading_order)
    error, place = errors[first], places[first]
    unexpected = [_given_name(e) for e in errors if e["type"] in _UNEXPECTED and e["loc"][:-1] == error["loc"][:-1]]
    return ": ".join([*place.names, _problem(error, place, unexpected)])


def _rank(error: ErrorDetails, place: _Place) -> int:
    if error["type"] in _UNEXPECTED:
        return _UNKNOWN if _given_name(error) not in _ALLOWED[place.holder] else _MISPLACED
    return _MISSING if error["type"] == "missing" else _VALUE


def _given_name(error: ErrorDetails) -> object:
    # pydantic writes a key that is no string (1, true, null) as a string in `loc`; `input` is the key itself.
    return error["input"] if error["type"] == "invalid_key" else error["loc"][-1]


def _problem(error: ErrorDetails, place: _Place, unexpected: list[object]) -> str:
    kind, given, field = error["type"], error["input"], str(place.field)
    if kind == "value_error":
        return str(error.get("ctx", {})["error"])
    if kind in _UNEXPECTED:
        return _unexpected(place, unexpected)
    if kind == "missing":
        return f"{field} is missing{_MISSING_HINT.get(field, '')}"
    if kind == "too_short" and field in _EMPTY:
        return _EMPTY[field]
    if place.field is None:
        found = "empty" if given is None else f"a {_yaml_kind(given)}"
        return (_NOT_A_RULE if place.holder == "rule" else _NOT_A_FILE).format(kind=_yaml_kind(given), found=found)
    words = _ITEM_TAKES.get(field, _TAKES[field]) if place.item else _TAKES[field]
    return words.format(field=field, value=repr(given), kind=_yaml_kind(given))


def _unexpected(place: _Place, given: list[object]) -> str:
    allowed = _ALLOWED[place.holder]
    unknown = [name for name in given if name not in allowed]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        return f"unknown field{plural} {', '.join(repr(k) for k in unknown)} (allowed: {', '.join(allowed)})"
    asking = [name for name in _ASK_FIELDS if name in given]
    if asking:
        return (f"{', '.join(asking)} would be ignored on {_a(place.decision)} rule (only ask rules use "
                f"{', '.join(_ASK_FIELDS)}); remove it or make the rule ask")
    return (f"reason would be ignored on {_a(place.decision)} rule (only a deny rule tells the model why); "
            "remove it or make the rule deny")


def _a(decision: str) -> str:
    return f"an {decision}" if decision[0] in "aeiou" else f"a {decision}"


def _yaml_kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "text", bool: "boolean", int: "number",
            float: "number", type(None): "nothing"}.get(type(value), type(value).__name__)

