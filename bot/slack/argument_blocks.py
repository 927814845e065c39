"""An approval's arguments in Block Kit: whole where they fit; else a short form that says so and
offers no Approve, the modal that holds them all with Approve, and the modal that edits them (one
input per argument) with what its submission says. Pure: records in, dicts out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from signoff.bot.arguments import ToolDisplay, argument_lines, argument_pairs
from signoff.bot.slack.approval_buttons import (
    approval_value,
    approve_button,
    approve_similar_button,
    deny_button,
    edit_button,
)
from signoff.bot.slack.blocks import (
    APPROVAL_BLOCK,
    ARGS_MODAL,
    EDIT_MODAL,
    MAX_MODAL_TITLE,
    MAX_PRIVATE_METADATA,
    MAX_SECTION_TEXT,
    MAX_VIEW_BLOCKS,
    VIEW_ARGS_ACTION,
    actions,
    budget_line,
    button,
    clip,
    code,
    code_sections,
    context,
    escape,
    model_says,
    safe,
    section,
    slack_date,
    untrusted,
    user,
)
from signoff.bot.untrusted import flat
from signoff.bot.words import approval_preview, capitalized, counted, model_words, preview_text
from signoff.runtime.records import ApprovalRecord, RunRecord
from signoff.runtime.state import Redacted, redact
from signoff.tools.base import Tool

CARD_SECTIONS = 2
"""Code sections of arguments a channel card holds; with the rest it stays under Slack's ~12k characters."""
HOME_SECTIONS = 1
"""Per approval in App Home, which lists up to 15 of them in one 100-block view."""
MODAL_SECTIONS = MAX_VIEW_BLOCKS - 3
"""The modal's own blocks: what is asked, the expiry, the Approve button."""
_SHORT_VALUE = 300
"""A value longer than this (escaped) is left out of the short form and named with its size."""


@dataclass(frozen=True)
class ShownArguments:
    """How one surface shows an approval's arguments, and the decision buttons that go with that."""

    label: str
    """An mrkdwn line: how many arguments, and whether they are all here in full."""
    sections: list[dict[str, Any]]
    buttons: list[dict[str, Any]]
    whole: bool


def approvable_in(approval: ApprovalRecord, display: ToolDisplay, room: int) -> bool:
    """Whether a surface with `room` code sections offers Approve for `approval`: only beside every
    argument in full. A click is taken only where the surface it came from could offer it."""
    return code_sections(argument_lines(approval.args, display), room) is not None


def shown_arguments(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay, room: int) -> ShownArguments:
    """The arguments in at most `room` code sections, or the short form, with its buttons.

    Approve is offered only beside every argument in full. A short form offers *View full
    arguments* (the modal, with Approve) if the modal holds them, and otherwise only Deny.
    """
    lines = argument_lines(approval.args, display)
    deny = deny_button(approval)
    # Edit opens a form of the values as they are, which Slack's inputs hold only up to a size.
    edit = [edit_button(approval)] if approval.status == "pending" and editable(approval.args, display) else []
    full = code_sections(lines, room)
    if full is not None:
        label = f"*Arguments* ({len(lines)}, one a line, in full)" if lines else "*Arguments*: none"
        approve = approve_button(approval, tool_confirms=display.confirm)
        similar = approve_similar_button(approval, tool_confirms=display.confirm)
        return ShownArguments(label, [code_section(s) for s in full],
                              [approve, *([similar] if similar else []), deny, *edit], True)
    size = f"*Arguments* ({len(lines)}): {sum(map(len, lines)):,} characters, too long to show in full here"
    if approval.status != "pending":
        label = f"{size}; `signoff runs show {safe(run.run_id, 80)} --json` has them in full."
        buttons = []
    elif code_sections(lines, MODAL_SECTIONS) is not None:
        label = (f"{size}, so Approve is not offered on this short form. *View full arguments* shows every "
                 "one of them, with Approve.")
        buttons = [button("View full arguments", VIEW_ARGS_ACTION, approval_value(approval), "primary"), deny, *edit]
    else:
        label = f"{size}. {too_long_for_slack(run.run_id)}"
        buttons = [deny, *edit]
    return ShownArguments(label, [code_section(_short_form(approval, display))], buttons, False)


CARD_PREVIEW_CHARS = 1200
"""How much of a preview a card shows; *View full arguments* shows all of it."""


def preview_blocks(preview: Mapping[str, Any], room: int | None) -> list[dict[str, Any]]:
    """What the call will do, as its preview said (`room`: characters shown, None: all of it, in as
    many sections as it takes), and what an earlier approval showed if the world changed since."""
    if preview.get("digest") is None:
        return [section(f":warning: *No preview*: {untrusted(preview.get('error') or 'none was taken', 300)}. Approve "
                        "only if the arguments alone say what it will do.")]
    blocks = []
    if preview.get("was") is not None:
        blocks.append(section(":rotating_light: *The world changed since this call was approved*, so that "
                              "approval was void and nothing ran. Its preview then was:\n"
                              + code(preview_text(preview["was"]), min(room or 1500, 1500))))
    text = preview_text(preview.get("shown"))
    label = "*Preview*: what it will do, as its tool says now (the approval is bound to it)"
    if room is not None and len(text) > room:
        return [*blocks, section(f"{label}; the first {room:,} of {len(text):,} characters, *View full arguments* "
                                 f"has it all:\n" + code(text[:room], room + 8))]
    chunk = MAX_SECTION_TEXT - 300
    parts = [text[i:i + chunk] for i in range(0, len(text), chunk)] or [""]
    return [*blocks, section(f"{label}:\n" + code(parts[0], chunk + 8)),
            *(section(code(part, chunk + 8)) for part in parts[1:])]


def too_long_for_slack(run_id: str) -> str:
    """What an approver is told when not even a modal holds the arguments."""
    return ("They are too long even for a Slack dialog, so Slack offers no Approve. To approve, read them "
            f"in a terminal: `signoff runs resume {safe(run_id, 80)}`.")


def not_editable_in_slack(run_id: str) -> str:
    """What someone who clicks Edit is told when Slack's inputs cannot hold the arguments."""
    return ("These arguments do not fit Slack's form (a value over 3,000 characters, too many of them, or a "
            f"tool not loaded here). To edit them, use a terminal: `signoff runs resume {safe(run_id, 80)}`.")


def _short_form(approval: ApprovalRecord, display: ToolDisplay) -> str:
    """Whole argument lines that are short; the others named with their size, never cut."""
    room = MAX_SECTION_TEXT - 100
    lines: list[str] = []
    pairs = argument_pairs(approval.args, display)
    for index, (name, value) in enumerate(pairs):
        line = f"{escape(name)}: {escape(value)}"
        if len(line) > _SHORT_VALUE:
            # Bare words in parentheses: no value renders like that (strings are quoted), so this
            # cannot be read as the argument's value.
            shown = escape(name) if len(escape(name)) <= _SHORT_VALUE else f"(a name of {len(name):,} characters)"
            line = f"{shown}: (not shown here: {len(value):,} characters)"
        if sum(len(x) + 1 for x in lines) + len(line) > room:
            lines.append(f"(and {counted(len(pairs) - index, 'more argument')}, not shown here)")
            break
        lines.append(line)
    return "```\n" + "\n".join(lines) + "\n```"


def code_section(text: str) -> dict[str, Any]:
    """A section holding one of `code_sections`' blocks, shown as it is."""
    block = section(text)
    block["text"]["verbatim"] = True  # no auto-linking of names, channels or URLs inside the arguments
    return block


def arguments_modal(run: RunRecord, approval: ApprovalRecord, display: ToolDisplay) -> dict[str, Any] | None:
    """Every argument in full with Approve, or None if even a modal cannot hold them; the model's
    words beside the call too, when `run` carries its history."""
    lines = argument_lines(approval.args, display)
    sections = code_sections(lines, MODAL_SECTIONS)
    if sections is None:
        return None
    about = f"\n{untrusted(display.description, 300)}" if display.description else ""
    said = model_words(run.state.get("history") or (), approval.step)
    heading = (f"*Approve `{safe(approval.tool, 64)}`?* Asked by {user(run.requester)}, key "
               f"`{safe(approval.key, 120)}`{about}\n>{safe(run.goal, 600)}\n"
               + (f"{model_says(said)}\n" if said else "")
               + f"*Arguments* ({len(lines)}, one a line, in full)")
    similar = approve_similar_button(approval, tool_confirms=display.confirm)
    preview = approval_preview(run, approval)
    blocks = [section(heading), *(code_section(s) for s in sections), *(preview_blocks(preview, None) if preview else []),
              context(f"expires {slack_date(approval.expires_at)} · budget used: {budget_line(run.state)}"),
              actions(APPROVAL_BLOCK, [approve_button(approval, tool_confirms=display.confirm),
                                       *([similar] if similar else [])])]
    return _modal(approval, blocks)


def outcome_modal(text: str) -> dict[str, Any]:
    """The full-arguments modal after a click on its Approve: what came of it (`text` is safe mrkdwn)."""
    return {"type": "modal", "callback_id": ARGS_MODAL, "title": {"type": "plain_text", "text": "Approval"},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": [section(clip(text, MAX_SECTION_TEXT))]}


def _modal(approval: ApprovalRecord, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = json.dumps({"approval": approval.approval_id, "digest": approval.digest})
    assert len(metadata) <= MAX_PRIVATE_METADATA and len(blocks) <= MAX_VIEW_BLOCKS
    return {"type": "modal", "callback_id": ARGS_MODAL, "private_metadata": metadata,
            "title": {"type": "plain_text", "text": clip(f"Approve {approval.tool}?", MAX_MODAL_TITLE)},
            "close": {"type": "plain_text", "text": "Close"}, "blocks": blocks}


# -- the edit modal ---------------------------------------------------------------------------------

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
