"""The terminal as a console: lines out, answers in, one a line.

Plain text, ASCII only, so the output reads the same in a pipe, a log file or a terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TextIO

import click

MAX_INVALID_ANSWERS = 3


class Console:
    """Lines out, answers in (one a line).

    `quiet` keeps everything but the outcome line off the output, except where a person types the
    answers (`interactive`): what they are asked, and what they decide on, is always shown to them.
    """

    def __init__(self, out: TextIO, answers: TextIO, *, quiet: bool = False, echo_answers: bool = False,
                 interactive: bool = False) -> None:
        self.out, self.answers, self.quiet = out, answers, quiet
        self.echo_answers = echo_answers
        """Repeat piped answers after their prompt, so a transcript shows what was decided."""
        self.interactive = interactive

    def say(self, text: str = "") -> None:
        if self.says:
            click.echo(text, file=self.out)

    @property
    def says(self) -> bool:
        """Whether `say` prints: a caller with nothing else to do need not build what would be dropped."""
        return not self.quiet

    def show(self, text: str = "") -> None:
        """What a person needs to answer the next question (an approval card, why an answer was not
        taken): said even with `quiet` when a person at a terminal answers."""
        if self.asks_aloud:
            click.echo(text, file=self.out)

    @property
    def asks_aloud(self) -> bool:
        # Piped answers with --quiet are a script's: it reads the outcome line only.
        return not self.quiet or self.interactive

    def outcome(self, text: str) -> None:
        click.echo(text, file=self.out)

    def read(self, prompt: str) -> str | None:
        """One answer line, stripped; None at end of input."""
        if self.asks_aloud:
            click.echo(prompt, file=self.out, nl=False)
        line = self.answers.readline()
        if not line:
            self.show("")
            return None
        answer = line.strip()
        if self.echo_answers and self.asks_aloud:
            click.echo(answer, file=self.out)
        return answer

    def choose(self, prompt: str, choices: Mapping[str, str], aliases: Mapping[str, str] | None = None) -> str | None:
        """One of `choices` (answer letter -> meaning) by its letter, its word or one of `aliases`
        (another answer -> meaning); None at end of input.

        Only a few unusable answers are tolerated, so an endless stream of them cannot loop forever.
        """
        accepted = {**(aliases or {}), **choices, **{v: v for v in choices.values()}}
        for _ in range(MAX_INVALID_ANSWERS):
            answer = self.read(prompt)
            if answer is None:
                return None
            if answer.lower() in accepted:
                return accepted[answer.lower()]
            self.show(f"  please answer {', '.join(choices)}")
        self.show(f"  no usable answer after {MAX_INVALID_ANSWERS} tries; stopping here")
        return None
