"""The built-in demo toolset."""

from signoff.tools.demo.toolset import demo_tools

__all__ = ["demo_tools"]
