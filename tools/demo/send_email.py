"""`send_email`: "sends" by writing one RFC 5322 `.eml` file per idempotency key into the outbox."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from signoff.tools.base import Tool, ToolFailed
from signoff.tools.demo.outbox import args_digest, file_stem, locked, write_atomically

SENDER = "Signoff demo <outbox@signoff.invalid>"
KEY_HEADER = "X-Signoff-Idempotency-Key"
DIGEST_HEADER = "X-Signoff-Args-Digest"

# A pragmatic subset of RFC 5321 addresses (no quoted local parts, no IP literals), so that the
# demo needs no email-validator dependency.
_ADDRESS = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$"
)


def _address(value: str) -> str:
    value = value.strip()
    local, _, domain = value.rpartition("@")
    if len(value) > 254 or len(local) > 64 or not _ADDRESS.match(value):
        raise ValueError("not a valid email address")
    return f"{local}@{domain.lower()}"


def _one_line(value: str) -> str:
    # A newline in a header would let the model inject headers (Bcc:) the approver never saw.
    if "\r" in value or "\n" in value:
        raise ValueError("must be a single line")
    return _not_blank(value.strip())


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


EmailAddress = Annotated[str, AfterValidator(_address)]


class SendEmailArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    to: EmailAddress = Field(json_schema_extra={"format": "email"}, description="One recipient address.")
    subject: Annotated[str, AfterValidator(_one_line)] = Field(min_length=1, max_length=200)
    body: Annotated[str, AfterValidator(_not_blank)] = Field(
        min_length=1, max_length=20_000, description="Plain text body."
    )


def deliver(outbox: Path, args: dict[str, Any], key: str) -> dict[str, Any]:
    """Write the message for `key` unless it exists; either way return the same description of it."""
    parsed = SendEmailArgs.model_validate(args)
    digest = args_digest(parsed.model_dump(mode="json"))
    path = (outbox / f"{file_stem(key)}.eml").resolve()
    # The lock makes "exists? else write" one step across processes; the atomic rename means a
    # crash leaves either no message or a whole one, never half of one.
    with locked(outbox / ".send_email.lock"):
        if not path.exists():
            write_atomically(path, _message(parsed, key, digest).as_bytes(policy=policy.SMTP))
        with open(path, "rb") as handle:
            written = BytesParser(policy=policy.default).parse(handle, headersonly=True)
    if str(written[DIGEST_HEADER]).strip() != digest:
        raise ToolFailed(f"key {key!r} was already used for a different email ({path.name}); nothing was sent")
    return {
        "message_id": str(written["Message-ID"]),
        "path": str(path),
        "to": str(written["To"]),
        "subject": str(written["Subject"]),
        "date": str(written["Date"]),
    }


def _message(parsed: SendEmailArgs, key: str, digest: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = parsed.to
    message["Subject"] = parsed.subject
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@signoff.invalid>"
    message[KEY_HEADER] = key
    message[DIGEST_HEADER] = digest
    message.set_content(parsed.body)
    return message


def preview_email(args: dict[str, Any], key: str) -> str:
    """The message as it would be sent: its headers (but for the date it is sent) and its body."""
    parsed = SendEmailArgs.model_validate(args)
    return f"From: {SENDER}\nTo: {parsed.to}\nSubject: {parsed.subject}\n\n{parsed.body}"


def send_email_tool(outbox: Path) -> Tool:
    """The side-effecting `send_email` tool, writing `.eml` files into `outbox`."""
    return Tool(
        name="send_email",
        fn=partial(deliver, outbox),
        preview=preview_email,
        side_effect=True,
        idempotent=True,
        args_model=SendEmailArgs,
        description=(
            "Send a plain-text email to one recipient. The customer will read it: check the address, "
            "the subject and every word of the body. (Demo: the message is written to the outbox.)"
        ),
        timeout_s=10.0,
    )
