"""Tools: the registry and the built-in toolsets."""

from signoff.tools.base import Tool, ToolFailed

__all__ = ["Tool", "ToolFailed"]
