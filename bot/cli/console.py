"""The terminal as a console: lines out, answers in, one a line.

Plain text, ASCII only, so the output reads the same in a pipe, a log file or a terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

import click

MAX_INVALID_ANSWERS = 3


class Console:
    """Lines out, answers in (one a line). `quiet` keeps everything but the outcome line off the output."""

    def __init__(self, out: TextIO, answers: TextIO, *, quiet: bool = False, echo_answers: bool = False) -> None:
        self.out, self.answers, self.quiet = out, answers, quiet
        self.echo_answers = echo_answers
        """Repeat piped answers after their prompt, so a transcript shows what was decided."""

    def say(self, text: str = "") -> None:
        if not self.quiet:
            click.echo(text, file=self.out)

    def outcome(self, text: str) -> None:
        click.echo(text, file=self.out)

    def read(self, prompt: str) -> str | None:
        """One answer line, stripped; None at end of input."""
        if not self.quiet:
            click.echo(prompt, file=self.out, nl=False)
        line = self.answers.readline()
        if not line:
            self.say("")
            return None
        answer = line.strip()
        if self.echo_answers and not self.quiet:
            click.echo(answer, file=self.out)
        return answer

    def choose(self, prompt: str, choices: Mapping[str, str]) -> str | None:
        """One of `choices` (answer letter -> meaning) by its letter or its word; None at end of input.

        Only a few unusable answers are tolerated, so `yes | signoff ...` cannot loop forever.
        """
        accepted = {**choices, **{v: v for v in choices.values()}}
        for _ in range(MAX_INVALID_ANSWERS):
            answer = self.read(prompt)
            if answer is None:
                return None
            if answer.lower() in accepted:
                return accepted[answer.lower()]
            self.say(f"  please answer {', '.join(choices)}")
        self.say(f"  no usable answer after {MAX_INVALID_ANSWERS} tries; stopping here")
        return None
