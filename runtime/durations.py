"""A span of time as a sentence says it to people and to the model: `10 min`, `2 h`, `90 s`. Pure."""

from __future__ import annotations


def spoken(span_seconds: float) -> str:
    """`span_seconds` in the largest whole unit that fits it: hours, minutes, else seconds."""
    seconds = int(span_seconds)
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds and seconds % 60 == 0 else f"{seconds} s"
