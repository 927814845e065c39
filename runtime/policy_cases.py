"""A policy's test cases (`signoff policy test`): a YAML list of calls, each with what the policy
should decide of it, read and checked against a verdict. Pure: no I/O.

A case is read as strictly as the policy file is (no field it does not know, its own types), and
every problem is one `CasesError` naming the file, the case and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from signoff.runtime.approval_policy import DECISIONS, Allow, Ask, Deny, Grant, ProposedCall, Verdict
from signoff.runtime.policy_schema import Duration, GrantFile, Quorum, SlackIds
from signoff.runtime.schema import NO_USAGE
from signoff.tools.strict_yaml import load_yaml

ASK_ONLY = ("approvers", "quorum", "ttl", "grant")
"""What only an asked call has: a case expecting allow or deny cannot expect them."""
_TAKES = {
    "name": "must be text, got {value}",
    "tool": "must be a tool's name, got {value}",
    "args": "must be a mapping of the call's arguments, got {kind}",
    "requester": "must be a Slack user id as text, got {value}",
    "channel": "must be a Slack channel id as text, got {value}",
    "usage": "must be a mapping of numbers (e.g. cost_usd: 0.5, tool_calls: 3), got {value}",
    "expect": f"must be one of {', '.join(DECISIONS)}, got {{value}}",
    "rule": "must be a rule's name, or null for no rule (the default), got {value}",
    "approvers": "must be a list of Slack ids, got {value}",
    "quorum": "must be a whole number of people, 1 or more, got {value}",
    "ttl": "must be a duration like 90s, 15m, 2h, 1h30m or 1d, or a number of seconds, got {value}",
    "grant": "must be true, false, or a grant as a policy writes it (for, same, scope), got {value}",
}
"""What each field is told of a value it does not take."""


class CasesError(ValueError):
    """A cases file that cannot be read; the one message names the file, the case and the field."""


class CaseFile(BaseModel):
    """One case as written."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    name: str | None = None
    tool: Annotated[str, Field(min_length=1)]
    args: dict[str, Any] = {}
    requester: str = ""
    channel: str = ""
    usage: dict[str, int | float] = {}
    expect: Literal["allow", "ask", "deny"]
    rule: str | None = None
    approvers: SlackIds | None = None
    quorum: Quorum | None = None
    ttl: Duration | None = None
    grant: bool | GrantFile | None = None


@dataclass(frozen=True)
class Case:
    """A call and what the policy should decide of it: `expected` holds only the fields the case gives."""

    label: str
    """`case 3 "big refunds ask finance"`, or `case 3` for a case without a name."""
    tool: str
    args: Mapping[str, Any]
    requester: str
    channel: str
    usage: Mapping[str, Any]
    expected: Mapping[str, Any]

    def call(self, args: Mapping[str, Any], side_effect: bool) -> ProposedCall:
        """The call the policy is asked about, with `args` as a run's rules would see them."""
        return ProposedCall(tool=self.tool, args=args, side_effect=side_effect, requester=self.requester,
                            channel=self.channel, usage=self.usage)


def case_label(position: int, name: object) -> str:
    """How a message names the case at `position` (from 1)."""
    return f"case {position} {name!r}" if isinstance(name, str) and name.strip() else f"case {position}"


def parse_cases(text: str, *, source: str) -> list[Case]:
    """The cases written in `text` (YAML), or a `CasesError` naming `source`, the case and the problem."""
    try:
        document = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise CasesError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(document, list) or not document:
        found = "empty" if document in (None, []) else f"a {_kind(document)}"
        raise CasesError(f"{source}: expected a list of cases (each with tool, args and expect), the file is {found}")
    return [_case(raw, position, source) for position, raw in enumerate(document, start=1)]


def _case(raw: Any, position: int, source: str) -> Case:
    label = case_label(position, raw.get("name") if isinstance(raw, dict) else None)
    if not isinstance(raw, dict):
        raise CasesError(f"{source}: {label}: expected a mapping with tool, args and expect, got a {_kind(raw)}")
    try:
        case = CaseFile.model_validate(raw)
    except ValidationError as exc:
        raise CasesError(f"{source}: {label}: {_problem(exc.errors(), raw)}") from None
    given = case.model_fields_set
    misplaced = [name for name in ASK_ONLY if name in given] if case.expect != "ask" else []
    if misplaced:
        raise CasesError(f"{source}: {label}: {misplaced[0]}: only an asked call has {', '.join(ASK_ONLY)}; "
                         f"remove it or expect ask")
    expected = {"expect": case.expect, **{name: getattr(case, name) for name in ("rule", *ASK_ONLY) if name in given}}
    if isinstance(expected.get("grant"), GrantFile):
        expected["grant"] = expected["grant"].grant()
    return Case(label, case.tool, case.args, case.requester, case.channel, {**NO_USAGE.to_json(), **case.usage},
                expected)


def _problem(errors: list[ErrorDetails], raw: Mapping[str, Any]) -> str:
    """The first problem, in the order the fields are listed, worded by its field."""
    fields = list(CaseFile.model_fields)
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return f"{unknown[0]}: unknown field (the fields are {', '.join(fields)})"
    error = min(errors, key=lambda e: fields.index(str(e["loc"][0])) if e["loc"] else -1)
    field = str(error["loc"][0]) if error["loc"] else "case"
    if error["type"] == "missing":
        return f"{field}: missing"
    if error["type"] == "value_error":
        return f"{field}: {error.get('ctx', {}).get('error')}"
    given = raw.get(field)  # as written: a nested error's `input` is only the part that was wrong
    return f"{field}: " + _TAKES[field].format(value=repr(given), kind=_kind(given))


def differences(case: Case, verdict: Verdict) -> tuple[str, ...]:
    """The expected fields the verdict does not meet, in the order they are listed (none: the case passes)."""
    decided = {Allow: "allow", Ask: "ask", Deny: "deny"}[type(verdict)]
    if decided != case.expected["expect"]:
        return ("expect",)
    requirement = verdict.requirement if isinstance(verdict, Ask) else None
    found: dict[str, Any] = {"rule": verdict.rule}
    if requirement is not None:
        found |= {"approvers": sorted(requirement.approvers), "quorum": requirement.quorum, "ttl": requirement.ttl,
                  "grant": requirement.grant}
    return tuple(name for name, value in case.expected.items()
                 if name != "expect" and not _meets(name, value, found.get(name)))


def _meets(name: str, expected: Any, found: Any) -> bool:
    if name == "approvers":  # who may decide, not the order they are written in
        return bool(sorted(expected) == found)
    if name == "grant" and isinstance(expected, bool):
        return (found is not None) == expected
    if name == "ttl":
        return isinstance(found, timedelta) and found == expected
    if name == "grant":
        return isinstance(found, Grant) and found == expected
    return bool(expected == found)


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "text", bool: "boolean", int: "number",
            float: "number", type(None): "nothing"}.get(type(value), type(value).__name__)
