"""The modal that edits a pending call's arguments, one input per argument, and what its submission
says: the arguments it asks for, or what is wrong beside each input. Pure: records in, dicts out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from signoff.bot.arguments import ToolDisplay
from signoff.bot.slack.blocks import (
    EDIT_MODAL,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_VIEW_BLOCKS,
    clip,
    context,
    safe,
    section,
    slack_date,
    user,
)
from signoff.bot.untrusted import flat
from signoff.bot.words import capitalized
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import Redacted, redact
from signoff.tools.base import Tool

EDIT_INPUT = "value"
"""The action id of every input in the edit modal; each sits in its own block (`edit_block`)."""
MAX_INPUT_TEXT = 3000
"""The most a Slack text input holds (its `max_length` cannot go higher): a longer value is not
editable in Slack, and `signoff runs resume` is the place to change it."""
_EDIT_FIELDS = MAX_VIEW_BLOCKS - 2
"""Inputs the edit modal holds beside its heading and its footer."""
_MULTILINE = 120
FieldKind = Literal["text", "number", "integer", "boolean", "json"]


@dataclass(frozen=True)
class EditField:
    """One input of the edit modal: an argument (or, for a tool that declares none, the whole
    arguments as one JSON object: `name` None) and how it is typed in."""

    name: str | None
    kind: FieldKind
    required: bool
    secret: bool
    """Never filled in (Slack would show it); left empty, the value stays as it is."""
    value: Any = None
    present: bool = False
    """The call has this argument now (`value` is it)."""
    description: str = ""
    kept: Any = None
    """For the one JSON box: the arguments as they are, secrets and all, whose secrets `value`
    shows only as fingerprints (None: it shows every argument as it is)."""


def edit_block(index: int) -> str:
    """The block id of the edit modal's `index`th input."""
    return f"signoff.edit.{index}"


def editable(args: Any, display: ToolDisplay) -> bool:
    """Whether the edit modal can hold these arguments: each value fits an input (secrets are
    never filled in), and there are not more of them than a modal holds."""
    if not isinstance(args, dict):
        return False
    if not display.order:
        return len(_json(args)) <= MAX_INPUT_TEXT
    shown = [value for name, value in args.items() if not _is_secret(name, display)]
    return (len({*display.order, *args}) <= _EDIT_FIELDS
            and all(len(_input_text(value)) <= MAX_INPUT_TEXT for value in shown))


def edit_fields(approval: ApprovalRecord, tool: Tool | None, display: ToolDisplay) -> list[EditField] | None:
    """The inputs that edit `approval`'s call, in the tool's argument order, then any other
    argument the call has; None if its tool is not loaded here or the arguments do not fit."""
    if tool is None or not editable(approval.args, display):
        return None
    schema = tool.json_schema()
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    if not properties:  # one JSON box: each secret in it is its fingerprint, kept as it is unless retyped
        masked = redact(approval.args, display.secret_names, mask=lambda secret: str(Redacted.of(secret)))
        hint = ("The arguments, as one JSON object." + (" A secret shows as its fingerprint, [redacted: …]: leave "
                                                        "that as it is to keep the secret." if masked != approval.args
                                                        else ""))
        return [EditField(None, "json", True, masked != approval.args, masked, True, hint, approval.args)]
    required = set(schema.get("required") or ())
    names = [*properties, *(name for name in approval.args if name not in properties)]
    if len(names) > _EDIT_FIELDS:
        return None
    return [EditField(name, _kind(properties.get(name) or {}, approval.args.get(name), name in approval.args),
                      name in required, _is_secret(name, display), approval.args.get(name), name in approval.args,
                      flat((properties.get(name) or {}).get("description") or ""))
            for name in names]


def edit_modal(run: RunRecord, approval: ApprovalRecord, fields: list[EditField], *,
               channel: str | None = None, home: bool = False) -> dict[str, Any]:
    """The modal that edits a pending call: one input per argument, filled in with its value (a
    secret is not: left empty, it stays as it is). `channel` and `home` say where to answer."""
    heading = (f"*Edit `{safe(approval.tool, 64)}`* for {user(run.requester)}, key `{safe(approval.key, 120)}`\n"
               "Change what should run. The edited call is asked about afresh: approvals given so far do not "
               "carry over, and you approve it like anyone else.")
    metadata = json.dumps({"approval": approval.approval_id, "digest": approval.digest,
                           **({"channel": channel} if channel else {}), **({"home": True} if home else {})})
    assert len(metadata) <= MAX_PRIVATE_METADATA and len(fields) <= _EDIT_FIELDS
    blocks = [section(heading), *(_input(index, field) for index, field in enumerate(fields)),
              context(f"expires {slack_date(approval.expires_at)} · what the model proposed stays in the "
                      "run's history")]
    return {"type": "modal", "callback_id": EDIT_MODAL, "private_metadata": metadata,
            "title": {"type": "plain_text", "text": clip(f"Edit {approval.tool}", MAX_MODAL_TITLE)},
            "submit": {"type": "plain_text", "text": "Ask afresh"},
            "close": {"type": "plain_text", "text": "Cancel"}, "blocks": blocks}


def _input(index: int, field: EditField) -> dict[str, Any]:
    element: dict[str, Any] = {"action_id": EDIT_INPUT}
    shown = field.present and (not field.secret or field.name is None)  # the JSON box shows fingerprints
    match field.kind:
        case "number" | "integer":
            element |= {"type": "number_input", "is_decimal_allowed": field.kind == "number"}
            if shown and field.value is not None:
                element["initial_value"] = json.dumps(field.value)
        case "boolean":
            options = [_option("true"), _option("false")]
            element |= {"type": "static_select", "options": options}
            if shown and isinstance(field.value, bool):
                element["initial_option"] = _option(json.dumps(field.value))
        case _:
            text = _input_text(field.value) if field.kind == "text" else _json(field.value)
            element |= {"type": "plain_text_input", "max_length": MAX_INPUT_TEXT,
                        "multiline": field.kind == "json" or "\n" in text or len(text) > _MULTILINE}
            if shown and text:
                element["initial_value"] = text
    secret_input = field.secret and field.name is not None  # left empty, it stays as it is
    block = {"type": "input", "block_id": edit_block(index), "optional": not field.required or secret_input,
             "label": {"type": "plain_text", "text": clip(field.name or "Arguments (JSON)", 2000)},
             "element": element}
    hint = _hint(field)
    if hint:
        block["hint"] = {"type": "plain_text", "text": clip(hint, 2000)}
    return block


def _hint(field: EditField) -> str:
    if field.secret and field.name is not None:
        return "A secret: it is not shown here. Leave it empty to keep it as it is."
    kind = {"number": "A number.", "integer": "A whole number.", "boolean": "",
            "json": "JSON: an object, a list, a quoted string, a number, true, false or null.", "text": ""}
    # An emptied text the call has stays, empty; anything else left empty is left out of the call.
    empty = "" if field.required or (field.kind == "text" and field.present) else (
        "Left empty, it is left out (the tool's default applies).")
    return " ".join(part for part in (field.description, kind[field.kind], empty) if part)


def _option(value: str) -> dict[str, Any]:
    return {"text": {"type": "plain_text", "text": value}, "value": value}


@dataclass(frozen=True)
class FieldErrors:
    """What is wrong with the edit modal's inputs, by block id: Slack shows each beside its input."""

    errors: dict[str, str]


def read_edit(fields: list[EditField], values: dict[str, Any]) -> dict[str, Any] | FieldErrors:
    """The arguments the submitted edit modal asks for, or what keeps its inputs from being read
    (`values` is the view's `state.values`). Whether they are arguments the tool takes is the
    tool's to say, through `Runner.edit`."""
    args: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for index, field in enumerate(fields):
        state = values.get(edit_block(index))
        state = state.get(EDIT_INPUT) if isinstance(state, dict) else None
        given, value, problem = _read(field, state if isinstance(state, dict) else {})
        if problem:
            errors[edit_block(index)] = problem
        elif field.name is None:
            args = _unmasked(value, field.kept) if isinstance(value, dict) and field.secret else (
                value if isinstance(value, dict) else args)
            if not isinstance(value, dict):
                errors[edit_block(index)] = "The arguments must be one JSON object, {...}."
        elif given:
            args[field.name] = value
        elif field.secret and field.present:
            args[field.name] = field.value
        elif field.kind == "text" and field.present:
            args[field.name] = ""  # a text the call has, emptied: Slack sends no value for an empty input
    return FieldErrors(errors) if errors else args


def _unmasked(typed: Any, kept: Any) -> Any:
    """`typed` with each fingerprint left as the JSON box showed it put back to the secret it stands
    for (`kept`: the arguments as they were); a secret retyped is taken as typed."""
    if isinstance(typed, dict) and isinstance(kept, dict):
        return {name: kept[name] if name in kept and value == str(Redacted.of(kept[name]))
                else _unmasked(value, kept.get(name)) for name, value in typed.items()}
    if isinstance(typed, list) and isinstance(kept, list) and len(typed) == len(kept):
        return [_unmasked(value, was) for value, was in zip(typed, kept, strict=True)]
    return typed


def _read(field: EditField, state: dict[str, Any]) -> tuple[bool, Any, str | None]:
    """(given, value, problem) of one input's state."""
    if field.kind == "boolean":
        chosen = (state.get("selected_option") or {}).get("value")
        return (chosen in ("true", "false"), chosen == "true", None)
    text = state.get("value")
    if not isinstance(text, str) or text == "":
        return False, None, None
    if field.kind == "text":
        return True, text, None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False, None, ("Not a number." if field.kind in ("number", "integer")
                             else "Not valid JSON: quote text, e.g. \"like this\".")
    if field.kind in ("number", "integer") and (isinstance(value, bool) or not isinstance(value, int | float)):
        return False, None, "Not a number."
    return True, value, None


def edit_errors(fields: list[EditField], reason: str) -> FieldErrors:
    """Where the tool's or the policy's refusal of an edit is shown in the modal: each `name:
    problem` of a validation error beside its argument's input, anything else beside the first."""
    by_name = {field.name: edit_block(index) for index, field in enumerate(fields) if field.name is not None}
    parts = reason.removeprefix(_INVALID).split("; ") if reason.startswith(_INVALID) else [reason]
    errors: dict[str, list[str]] = {}
    for part in parts:
        where, colon, problem = part.partition(": ")
        block = by_name.get(where.split(".")[0]) if colon else None
        errors.setdefault(block or edit_block(0), []).append(problem if block else part)
    return FieldErrors({block: clip(capitalized("; ".join(problems)), _MAX_ERROR) for block, problems in errors.items()})


_INVALID = "invalid arguments: "
"""How `Tool.validate` starts a refusal that names each argument (`name: problem; ...`)."""
_MAX_ERROR = 500


def _kind(schema: dict[str, Any], value: Any, present: bool) -> FieldKind:
    """How an argument is typed in: by the JSON types its schema allows and the value it has now."""
    variants = [schema, *(v for v in schema.get("anyOf") or schema.get("oneOf") or () if isinstance(v, dict))]
    types: set[str] = set()
    for variant in variants:
        declared = variant.get("type")
        types |= {declared} if isinstance(declared, str) else set(declared) if isinstance(declared, list) else set()
    types.discard("null")
    if types == {"boolean"}:
        return "boolean"
    if types == {"integer"}:
        return "integer"
    if types and types <= {"integer", "number"}:
        return "number"
    # A decimal taken as a number or a string (`"20.00"`) is typed in as text, as it is stored.
    if "string" in types and types <= {"string", "number", "integer"} and (not present or isinstance(value, str)):
        return "text"
    return "json"


def _input_text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _is_secret(name: str, display: ToolDisplay) -> bool:
    masked: Any = redact({name: True}, display.secret_names, mask=lambda secret: None)
    return bool(masked == {name: None})
