"""Text from outside Signoff, as every surface shows it: the model's words, a tool server's
descriptions and titles, previews, results and error text. Pure: text in, text out.

Such text is either one line among the surface's own words (`flat`), so it can draw no line of its
own, or lines the surface frames (`shown_lines`: a code block, an indented block), never free
lines. Either way, a character that draws nothing, or moves, reorders or erases what is drawn (a
terminal's escape sequences, direction overrides, zero-width characters) is shown as a
`\\u202e`-style escape, as arguments show it. Each surface adds its own escaping on top
(`bot.slack.blocks.untrusted` for mrkdwn) and cuts to its own length.
"""

from __future__ import annotations

from typing import Any

from signoff.bot.arguments import shown_char


def flat(text: Any) -> str:
    """`text` on one line: each run of whitespace (a newline, a tab, a line separator) one space."""
    return " ".join(_visible(word) for word in str(text).split())


def shown_lines(text: Any) -> list[str]:
    """`text` line by line, for a surface that frames each line as content; tabs expanded."""
    return [_visible(line.expandtabs(4)) for line in str(text).splitlines()]


def _visible(text: str) -> str:
    return "".join(shown_char(char) for char in text)
