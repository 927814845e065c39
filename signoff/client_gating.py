"""What `gated` (of `Signoff` and `AsyncSignoff`) needs: a function's call turned into an approval's
`args` and back, the call's idempotency key, and its outcome reported without hiding the call's own."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from signoff.client_approvals import Approval, AsyncApproval
from signoff.client_errors import SignoffError

log = logging.getLogger("signoff.client")


class Arguments:
    """How a gated function's call becomes the `args` of an approval, and back.

    Every parameter is named in `args` (defaults included); extra keyword arguments of a `**kwargs`
    parameter are named as themselves. A function with `*args` cannot be gated: they have no names.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.signature = inspect.signature(fn)
        kinds = {p.kind for p in self.signature.parameters.values()}
        if inspect.Parameter.VAR_POSITIONAL in kinds:
            raise TypeError(f"{fn.__qualname__}: a gated function cannot take *args (they have no names)")

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named

    def call(self, approved: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments that pass `approved` to the function."""
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        rest = dict(approved)
        for name, parameter in self.signature.parameters.items():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                continue
            if name not in rest:
                continue  # the function's default applies
            value = rest.pop(name)
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords[name] = value
        keywords.update(rest)  # to **kwargs; a function without one refuses them, as it would any call
        return positional, keywords


KeyFor = Callable[[dict[str, Any]], str]
"""Makes the idempotency key of a gated call from its arguments."""


def idempotency_key(key: str | KeyFor | None, tool: str, args: dict[str, Any]) -> str:
    if key is None:
        return f"{tool}:{uuid.uuid4()}"
    return key(args) if callable(key) else key


def report(send: Callable[[], object], approval: Approval) -> None:
    """Report an outcome; the call has run, so a failure to report it is logged, not raised over
    the call's own result or exception."""
    try:
        send()
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)


async def areport(sending: Awaitable[object], approval: AsyncApproval) -> None:
    try:
        await sending
    except SignoffError as exc:
        log.warning("could not report the outcome of approval %s: %s", approval.id, exc)

